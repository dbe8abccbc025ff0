package main

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/cdc"
)

// The libraries' messages describe the problem in their own terms; naming a command-line flag
// or environment variable is the CLI's job (a Go caller has neither). This reads every string
// literal of the library packages' non-test sources.
func TestLibraryMessagesNameNoCLIFlags(t *testing.T) {
	var names []string
	for _, c := range newRootCmd().Commands() {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Name != "help" {
				names = append(names, "--"+f.Name)
			}
		})
	}
	names = append(names, cliEnvVars...)
	slices.Sort(names)
	names = slices.Compact(names)
	dirs := []string{"../../cdc", "../../publisher"}
	// The signature package moves from internal/signature to signature; check whichever exists.
	found := false
	for _, d := range []string{"../../signature", "../../internal/signature"} {
		if _, err := os.Stat(d); err == nil {
			dirs, found = append(dirs, d), true
		}
	}
	if !found {
		t.Fatal("no signature package found")
	}
	literals := 0
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", dir, err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, file, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					return true
				}
				literals++
				for _, name := range names {
					if strings.Contains(s, name) {
						t.Errorf("%s: %q names %s, a flag or variable of the CLI", fset.Position(lit.Pos()), s, name)
					}
				}
				return true
			})
		}
	}
	if literals < 50 {
		t.Fatalf("read only %d string literals: the scan is not looking at the packages", literals)
	}
}

// The CLI adds the flag that fixes a library error.
func TestCLIAddsTheFlagToLibraryErrors(t *testing.T) {
	tests := []struct {
		err  error
		flag string
	}{
		{fmt.Errorf("set up: %w: slot lost WAL", cdc.ErrSlotInvalid), "--recreate-slot"},
		{fmt.Errorf("%w: slot uses plugin test_decoding", cdc.ErrSlotMismatch), "--slot"},
		{fmt.Errorf("%w: dropping the slot failed: %w", cdc.ErrPublicationMissing, cdc.ErrRecreateSlot), "--recreate-slot"},
		{fmt.Errorf("%w: cannot parse `postgres://x:y`", cdc.ErrBadDSN), "--dsn"},
	}
	for _, tt := range tests {
		got := explain(tt.err)
		if !strings.Contains(got.Error(), tt.flag) || !errors.Is(got, tt.err) {
			t.Errorf("explain(%q) = %q, want it to name %s and wrap the error", tt.err, got, tt.flag)
		}
	}
}
