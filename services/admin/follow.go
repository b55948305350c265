package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
)

// errReadOnly is Update's answer on a store opened with ReadOnly.
var errReadOnly = errors.New("admin: this store only follows the admin topic (read-only)")

// advance records that the consumer has read the record at offset o.
func (s *KafkaStore) advance(o int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o > s.pos {
		s.pos = o
		close(s.moved)
		s.moved = make(chan int)
	}
}

// catchUp is sync for a store that may not write: it waits until the
// consumer has read up to the topic's last stable offset as it is now, so
// every state committed before the call is applied. The consumer keeps
// transaction markers (kgo.KeepControlRecords), so the record just below
// that offset — often a commit marker — is seen too. The newest record of
// a partition is never compacted away (the cleaner skips the active
// segment), so the wait ends.
func (s *KafkaStore) catchUp(ctx context.Context) error {
	topic := s.cfg.Names.Admin
	lso, err := kadm.NewClient(s.cons).ListCommittedOffsets(ctx, topic)
	if err != nil {
		return fmt.Errorf("list the last stable offset: %w", err)
	}
	o, ok := lso.Lookup(topic, 0)
	if !ok || o.Err != nil {
		return fmt.Errorf("list the last stable offset of %s: %v", topic, o.Err)
	}
	start, err := kadm.NewClient(s.cons).ListStartOffsets(ctx, topic)
	if err != nil {
		return fmt.Errorf("list the start offset: %w", err)
	}
	if so, ok := start.Lookup(topic, 0); ok && so.Err == nil && so.Offset >= o.Offset {
		return nil // nothing to read
	}
	for {
		s.mu.Lock()
		pos, ch := s.pos, s.moved
		s.mu.Unlock()
		if pos >= o.Offset-1 {
			return nil
		}
		if err := wait(ctx, ch); err != nil {
			return err
		}
	}
}
