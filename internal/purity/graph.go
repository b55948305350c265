package purity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
)

// Package is one package of the import graph as `go list -json` reports it.
type Package struct {
	ImportPath string
	Dir        string
	Standard   bool
	GoFiles    []string
	Imports    []string
}

// List runs `go list -json` with args in dir and returns the packages it
// prints, in its order. The import graph comes from the go command itself,
// so build tags and file selection are the build's, not a re-parse of ours.
func List(dir string, args ...string) ([]Package, error) {
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	var pkgs []Package
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p Package
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs, nil
		} else if err != nil {
			return nil, fmt.Errorf("decode go list output: %w", err)
		}
		pkgs = append(pkgs, p)
	}
}

// chain names the import path from root to p ("a → b → p"), walking the
// first importer found breadth-first so that the shortest chain is named.
func chain(root string, pkgs map[string]Package, to string) string {
	prev := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			break
		}
		for _, imp := range pkgs[cur].Imports {
			if _, seen := prev[imp]; seen {
				continue
			}
			if _, ok := pkgs[imp]; !ok {
				continue
			}
			prev[imp] = cur
			queue = append(queue, imp)
		}
	}
	var path []string
	for p := to; p != ""; p = prev[p] {
		path = append([]string{p}, path...)
	}
	return strings.Join(path, " → ")
}
