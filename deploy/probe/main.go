// Command probe is the container healthcheck: it GETs a URL and exits 0 on a 2xx answer, 1
// otherwise. The runtime image is distroless (no shell, curl or wget), so docker-compose.yml
// runs it as ["CMD", "/usr/local/bin/probe", "http://localhost:9187/readyz"].
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() { os.Exit(probe(os.Args[1:], os.Stderr)) }

// timeout bounds the whole request; a healthcheck that hangs is a failed one.
const timeout = 3 * time.Second

func probe(args []string, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: probe URL   (exit 0 when GET URL answers 2xx)")
		return 2
	}
	client := &http.Client{Timeout: timeout}
	resp, err := client.Get(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "probe: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		fmt.Fprintf(stderr, "probe: %s: %s %s\n", args[0], resp.Status, strings.TrimSpace(string(body)))
		return 1
	}
	return 0
}
