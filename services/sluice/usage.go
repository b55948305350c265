package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-dev/sluice/services/gateway"
)

// runUsage implements `sluice usage`: a key's own limits and what is left
// (GET /v1/sluice/usage), as a table with units. The key comes from the
// environment or a file, never a flag: a command line is visible to every
// user of the machine.
func runUsage(ctx context.Context, args []string) error {
	fs := newFlags("usage")
	base := fs.String("url", envOr("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"), "the gateway's OpenAI base URL (env OPENAI_BASE_URL, which `sluice dev` prints)")
	keyFile := fs.String("key-file", "", "file holding the API key (default: env OPENAI_API_KEY)")
	asJSON := fs.Bool("json", false, "print the endpoint's JSON as is")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	key := strings.TrimSpace(os.Getenv("OPENAI_API_KEY"))
	if *keyFile != "" {
		b, err := os.ReadFile(*keyFile)
		if err != nil {
			return fmt.Errorf("--key-file: %w", err)
		}
		key, _, _ = strings.Cut(strings.TrimSpace(string(b)), "\n")
	}
	if key == "" {
		return errors.New("no API key: set OPENAI_API_KEY (sluice dev prints it) or pass --key-file FILE")
	}
	url := strings.TrimSuffix(*base, "/") + "/sluice/usage"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("--url %q: %w", *base, err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	cl := &http.Client{Timeout: 10 * time.Second}
	resp, err := cl.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	if *asJSON {
		_, err := os.Stdout.Write(body)
		return err
	}
	var u gateway.Usage
	if err := json.Unmarshal(body, &u); err != nil {
		return fmt.Errorf("GET %s: not a usage answer: %w", url, err)
	}
	printUsage(os.Stdout, &u)
	return nil
}

// printUsage renders a usage answer: one row per limit with its unit,
// used, of, left and when it is full again.
func printUsage(w io.Writer, u *gateway.Usage) {
	fmt.Fprintf(w, "tenant %s, key %s", u.Tenant, u.KeyID)
	if u.Team != "" {
		fmt.Fprintf(w, ", team %s", u.Team)
	}
	if u.Class != "" {
		fmt.Fprintf(w, ", class %s", u.Class)
	}
	if u.Paused {
		fmt.Fprint(w, " (PAUSED)")
	}
	fmt.Fprintln(w)
	if len(u.Limits) == 0 {
		fmt.Fprintln(w, "no limits of your own (only shared ones apply)")
		return
	}
	unknown, split := false, false
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tLEVEL\tLIMIT\tUSED\tOF\tLEFT\tFULL AGAIN")
	for _, l := range u.Limits {
		used, left, full := "?", "?", "-"
		unknown = unknown || l.Remaining == nil
		if l.Remaining != nil {
			left = fmt.Sprint(*l.Remaining)
			if l.Used != nil {
				used = fmt.Sprint(*l.Used)
			}
		}
		if l.ResetsAtMs > 0 {
			full = "in " + time.Duration(max(0, l.ResetsAtMs-u.NowMs)*int64(time.Millisecond)).Round(time.Second).String()
		}
		of := fmt.Sprint(l.Max)
		if l.Max != l.Capacity {
			of += " (burst)"
		}
		scope := l.Scope
		switch n := len(l.SubScopes); {
		case n == 1:
			scope += " (" + l.SubScopes[0].Scope + ")"
			split = true
		case n > 1:
			scope += fmt.Sprintf(" (%d sub-scopes)", n)
			split = true
		}
		fmt.Fprintf(tw, "%s\t%s:%s\t%d %s\t%s\t%s\t%s\t%s\n", scope, l.Level, l.ID, l.Capacity, l.Unit, used, of, left, full)
	}
	tw.Flush()
	if split {
		fmt.Fprintln(w, "sub-scopes: the scope is split over ledger partitions; a row sums each one's share of the limit (your key's requests all go to the one named, whose key bucket is whole)")
	}
	if unknown {
		fmt.Fprintln(w, "?: no ledger snapshot of that scope yet (a ledger writes one every --snapshot-every events or --snapshot-interval; sluice dev after every batch)")
	}
	fmt.Fprintln(w, "OF is what the bucket holds at once (a token bucket's burst: capacity × window / period); LEFT is read from the ledger's newest snapshot")
}
