package sim

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

const usage = `usage: sluice sim [--addr 127.0.0.1:0] [--config file.yaml]

Serves OpenAI-, Azure OpenAI-, Anthropic- and Gemini-style endpoints with
provider-like rate limits. Prints the base URL (http://host:port) on stdout,
then serves until interrupted.

flags:
`

// Run implements `sluice sim`. It prints the listen URL as the first line of
// stdout and serves until ctx is done. Bad flags or config give one error.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	cfgPath := fs.String("config", "", "YAML or JSON config file (default: built-in DefaultConfig)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil
		}
		return fmt.Errorf("sluice sim: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("sluice sim: unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	cfg := DefaultConfig()
	if *cfgPath != "" {
		var err error
		if cfg, err = LoadConfig(*cfgPath); err != nil {
			// A command's error is one line: the problems joined.
			return fmt.Errorf("sluice sim: %s", strings.ReplaceAll(err.Error(), "\n", "; "))
		}
	}
	srv, err := New(cfg)
	if err != nil {
		return fmt.Errorf("sluice sim: %w", err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("sluice sim: listen on %s: %w", *addr, err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "http://%s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("sluice sim: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
		fmt.Fprintf(stderr, "sluice sim: shutdown: %v\n", err)
	}
	return nil
}
