package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

const adminUsage = `usage: sluice admin [flags] METHOD PATH [JSON]

A thin client of the admin API (docs/admin-api.md). PATH is relative to
/admin/v1 (e.g. /tenants/shop/keys). For a change (POST, PUT, DELETE) it
fills in base_version with the current version when JSON has none, and the
reason from --reason. It prints the answer; an error answer exits 1.

  sluice admin GET /tenants
  sluice admin --reason onboarding POST /tenants '{"id":"shop","limits":[{"dimension":"requests","capacity":600}]}'
  sluice admin --reason "incident 42" POST /tenants/shop/keys/shop-app/pause

flags:`

// runAdmin is `sluice admin`.
func runAdmin(ctx context.Context, args []string) error {
	fs := newFlags("admin")
	base := fs.String("url", envOr("SLUICE_ADMIN_URL", "http://127.0.0.1:8080/admin/v1"), "admin API base URL (env SLUICE_ADMIN_URL)")
	tokenFile := fs.String("token-file", "", "file holding the operator or partner token (env SLUICE_ADMIN_TOKEN)")
	reason := fs.String("reason", "", "why: recorded with the change (required for a change unless JSON has one)")
	actor := fs.String("actor", "", "your name for the audit trail (operator token only; X-Sluice-Actor)")
	fs.Usage = func() { fmt.Fprintln(os.Stderr, adminUsage); fs.PrintDefaults() }
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) < 2 || len(rest) > 3 {
		return errors.New("want METHOD PATH [JSON] (sluice admin --help)")
	}
	method, path := strings.ToUpper(rest[0]), "/"+strings.TrimPrefix(rest[1], "/")
	token, err := readAdminToken(*tokenFile)
	if err != nil {
		return err
	}
	if token == "" {
		return errors.New("no admin token: set SLUICE_ADMIN_TOKEN or --token-file")
	}
	c := adminClient{base: strings.TrimSuffix(*base, "/"), token: token, actor: *actor, http: &http.Client{Timeout: 30 * time.Second}}
	var body []byte
	if method != http.MethodGet {
		doc := map[string]any{}
		if len(rest) == 3 {
			if err := json.Unmarshal([]byte(rest[2]), &doc); err != nil {
				return fmt.Errorf("JSON argument: %w", err)
			}
		}
		if _, ok := doc["reason"]; !ok {
			if *reason == "" {
				return errors.New("a change needs --reason (it goes into the audited config history)")
			}
			doc["reason"] = *reason
		}
		if _, ok := doc["base_version"]; !ok {
			v, err := c.version(ctx)
			if err != nil {
				return err
			}
			doc["base_version"] = v
		}
		if body, err = json.Marshal(doc); err != nil {
			return err
		}
	}
	status, out, err := c.do(ctx, method, path, body)
	if err != nil {
		return err
	}
	os.Stdout.Write(out)
	if status >= 400 {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(out, &e)
		return fmt.Errorf("%d %s: %s", status, e.Error.Code, e.Error.Message)
	}
	return nil
}

type adminClient struct {
	base, token, actor string
	http               *http.Client
}

func (c adminClient) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	if c.actor != "" {
		req.Header.Set("X-Sluice-Actor", c.actor)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("admin API at %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, out, err
}

// version reads the current admin state version (every list carries it).
func (c adminClient) version(ctx context.Context) (int64, error) {
	status, out, err := c.do(ctx, http.MethodGet, "/tenants", nil)
	if err != nil {
		return 0, err
	}
	var v struct {
		Version *int64 `json:"version"`
	}
	if status != 200 || json.Unmarshal(out, &v) != nil || v.Version == nil {
		return 0, fmt.Errorf("read the current version: %d %s", status, bytes.TrimSpace(out))
	}
	return *v.Version, nil
}
