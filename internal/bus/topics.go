package bus

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TopicSpec is the wanted shape of one topic.
type TopicSpec struct {
	Name       string
	Partitions int32
	// Replication is the replication factor; -1 lets the broker choose.
	Replication int16
	Configs     map[string]string
}

// SnapshotMaxBytes is the largest snapshot record the snapshots topic and
// the ledger's producer accept (compressed, as the broker counts it).
const SnapshotMaxBytes = 64 << 20

// AdminMaxBytes is the largest admin-state record the admin topic accepts.
const AdminMaxBytes = 8 << 20

// TopicsConfig sizes Sluice's topics. Its zero value is not valid; use
// DefaultTopics and override.
type TopicsConfig struct {
	// RequestPartitions is the number of provider-scope partitions of
	// sluice.requests; sluice.decisions gets the same count, and a decision
	// lands on its gateway's partition (DecisionPartition).
	RequestPartitions int32
	Replication       int16
	// RetentionMs of the request, decision and telemetry logs. Replay needs
	// the requests log back to the oldest snapshot it starts from.
	RetentionMs int64
	// Names of the topics; zero value = DefaultNames.
	Names Names
}

// DefaultTopics is a single-broker development sizing.
func DefaultTopics() TopicsConfig {
	return TopicsConfig{RequestPartitions: 8, Replication: 1, RetentionMs: 7 * 24 * 3600 * 1000}
}

// Specs returns the wanted topic specs for cfg.
func (c TopicsConfig) Specs() []TopicSpec {
	ret := strconv.FormatInt(c.RetentionMs, 10)
	n := c.Names.OrDefault()
	return []TopicSpec{
		{Name: n.Requests, Partitions: c.RequestPartitions, Replication: c.Replication, Configs: map[string]string{
			// The ledger's clock is the log's: the broker stamps each record.
			"message.timestamp.type": "LogAppendTime",
			"retention.ms":           ret,
			"cleanup.policy":         "delete",
		}},
		{Name: n.Decisions, Partitions: c.RequestPartitions, Replication: c.Replication, Configs: map[string]string{
			"message.timestamp.type": "LogAppendTime",
			"retention.ms":           ret,
			"cleanup.policy":         "delete",
		}},
		{Name: n.Snapshots, Partitions: 1, Replication: c.Replication, Configs: map[string]string{
			// Only the newest snapshot per partition key matters.
			"cleanup.policy": "compact",
			// A partition's state is one record; the broker default (1 MiB)
			// is far too small for it.
			"max.message.bytes": strconv.Itoa(SnapshotMaxBytes),
		}},
		{Name: n.Telemetry, Partitions: c.RequestPartitions, Replication: c.Replication, Configs: map[string]string{
			"retention.ms":   ret,
			"cleanup.policy": "delete",
		}},
		{Name: n.Admin, Partitions: 1, Replication: c.Replication, Configs: map[string]string{
			// Gateways need only the newest admin state (key "state"); the
			// history of changes is on sluice.requests (ConfigChanged with
			// actor, reason and change), replayed and audited there.
			"cleanup.policy": "compact",
			// The whole state is one record (tenants, keys, partners and
			// the ledger document).
			"max.message.bytes": strconv.Itoa(AdminMaxBytes),
		}},
		MembersSpec(n, c.Replication),
	}
}

// MembersSpec is the ledger members' heartbeat topic: one partition, since
// the liveness judgement reads the log order of every member's heartbeats,
// and records that matter for seconds only (a member reads it from its end).
func MembersSpec(n Names, replication int16) TopicSpec {
	return TopicSpec{Name: n.OrDefault().Members, Partitions: 1, Replication: replication, Configs: map[string]string{
		"cleanup.policy": "delete",
		"retention.ms":   "600000",
		"segment.ms":     "300000",
		// The liveness judgement compares append times, one clock.
		"message.timestamp.type": "LogAppendTime",
	}}
}

// EnsureResult says what Ensure did to one topic.
type EnsureResult struct {
	Topic  string
	Action string // "created" or "ok"
}

// MismatchError lists every way existing topics differ from their specs.
type MismatchError struct{ Problems []string }

func (e *MismatchError) Error() string {
	return "existing topics differ from the wanted configuration (fix the topic or the config; Sluice never alters live topics):\n  " +
		strings.Join(e.Problems, "\n  ")
}

// Ensure creates missing topics and checks existing ones against specs.
// Running it again is a no-op; a mismatch (partition count, a config value)
// is reported as a *MismatchError naming every difference.
func Ensure(ctx context.Context, adm *kadm.Client, specs []TopicSpec) ([]EnsureResult, error) {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	res, existing, err := createMissing(ctx, adm, specs, details)
	if err != nil {
		return res, err
	}
	// Metadata of a just-created topic lags its CreateTopics answer (on a
	// freshly started KRaft broker by up to seconds), and a caller that
	// produces or counts partitions at once would see "unknown topic". So
	// Ensure returns only once every topic, created or existing, shows its
	// partitions.
	if details, err = waitVisible(ctx, adm, names, details); err != nil {
		return res, err
	}
	if len(existing) == 0 {
		return res, nil
	}
	return checkExisting(ctx, adm, existing, details, res)
}

// createMissing creates each topic of specs that details does not list,
// and returns the results so far and the topics that already exist,
// including those a peer created between the listing and our create.
func createMissing(ctx context.Context, adm *kadm.Client, specs []TopicSpec, details kadm.TopicDetails) (res []EnsureResult, existing []TopicSpec, err error) {
	for _, s := range specs {
		if d, ok := details[s.Name]; ok && d.Err == nil {
			existing = append(existing, s)
			continue
		}
		cfg := make(map[string]*string, len(s.Configs))
		for k, v := range s.Configs {
			cfg[k] = kadm.StringPtr(v)
		}
		cr, err := adm.CreateTopic(ctx, s.Partitions, s.Replication, cfg, s.Name)
		if err == nil {
			err = cr.Err
		}
		if errors.Is(err, kerr.TopicAlreadyExists) {
			// Created a moment ago (by us or a peer) and not yet in the
			// metadata we listed: check it like any existing topic.
			existing = append(existing, s)
			continue
		}
		if err != nil {
			return res, existing, fmt.Errorf("create topic %s: %w", s.Name, err)
		}
		res = append(res, EnsureResult{Topic: s.Name, Action: "created"})
	}
	return res, existing, nil
}

// checkExisting compares each existing topic's partition count and
// configs with its spec, appending an "ok" result per topic to res; every
// difference goes into one *MismatchError.
func checkExisting(ctx context.Context, adm *kadm.Client, existing []TopicSpec, details kadm.TopicDetails, res []EnsureResult) ([]EnsureResult, error) {
	var problems []string
	exNames := make([]string, len(existing))
	for i, s := range existing {
		exNames[i] = s.Name
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, exNames...)
	if err != nil {
		return res, fmt.Errorf("describe topic configs: %w", err)
	}
	for _, s := range existing {
		if got := int32(len(details[s.Name].Partitions)); got != s.Partitions {
			problems = append(problems, fmt.Sprintf("%s: has %d partitions, want %d", s.Name, got, s.Partitions))
		}
		rc, err := rcs.On(s.Name, nil)
		if err != nil {
			return res, fmt.Errorf("describe topic %s: %w", s.Name, err)
		}
		if rc.Err != nil {
			return res, fmt.Errorf("describe topic %s: %w", s.Name, rc.Err)
		}
		problems = append(problems, configProblems(s, rc.Configs)...)
		res = append(res, EnsureResult{Topic: s.Name, Action: "ok"})
	}
	if len(problems) > 0 {
		return res, &MismatchError{Problems: problems}
	}
	return res, nil
}

// configProblems lists, in key order, each config of s whose value on the
// broker differs from the wanted one.
func configProblems(s TopicSpec, configs []kadm.Config) []string {
	have := map[string]string{}
	for _, c := range configs {
		if c.Value != nil {
			have[c.Key] = *c.Value
		}
	}
	keys := make([]string, 0, len(s.Configs))
	for k := range s.Configs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var problems []string
	for _, k := range keys {
		if have[k] != s.Configs[k] {
			problems = append(problems, fmt.Sprintf("%s: %s=%q, want %q", s.Name, k, have[k], s.Configs[k]))
		}
	}
	return problems
}

// waitVisible polls the metadata until every named topic has partitions, for
// at most 15 s; details is the last listing, reused when it already shows all.
func waitVisible(ctx context.Context, adm *kadm.Client, names []string, details kadm.TopicDetails) (kadm.TopicDetails, error) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		var missing []string
		for _, n := range names {
			if d, ok := details[n]; !ok || d.Err != nil || len(d.Partitions) == 0 {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 {
			return details, nil
		}
		if time.Now().After(deadline) {
			return details, fmt.Errorf("topics %s created but not visible in metadata after 15s", strings.Join(missing, ", "))
		}
		select {
		case <-ctx.Done():
			return details, fmt.Errorf("wait for topics %s: %w", strings.Join(missing, ", "), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
		// kadm answers ListTopics from the client's metadata cache (up to
		// MetadataMinAge, 5 s by default, old); asking for the authorized
		// operations makes it send a fresh request.
		var err error
		if details, err = adm.ListTopics(kadm.WithAuthorizedOps(ctx), names...); err != nil {
			return details, fmt.Errorf("list topics: %w", err)
		}
	}
}
