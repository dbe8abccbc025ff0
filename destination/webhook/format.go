package webhook

import (
	"fmt"
	"strings"
)

// Format is the wire format of a request.
type Format string

// Formats.
const (
	// FormatRaw is the default contract: the payload as the body, X-Event-* headers.
	FormatRaw Format = "raw"
	// FormatCloudEvents is CloudEvents 1.0 binary mode for one event per request (the payload
	// as the body, ce-* headers). Batches are CloudEvents batch mode in either format.
	FormatCloudEvents Format = "cloudevents"
)

// ParseFormat reads a format name in any case; empty is FormatRaw. Its error names the choices.
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(s)); f {
	case "":
		return FormatRaw, nil
	case FormatRaw, FormatCloudEvents:
		return f, nil
	}
	return "", fmt.Errorf("unknown format %q: use raw or cloudevents", s)
}

// Compression is the Content-Encoding of request bodies.
type Compression string

// Compressions.
const (
	CompressionNone Compression = "none"
	CompressionGzip Compression = "gzip"
)

// ParseCompression reads a compression name in any case; empty is CompressionNone. Its error
// names the choices.
func ParseCompression(s string) (Compression, error) {
	switch c := Compression(strings.ToLower(s)); c {
	case "":
		return CompressionNone, nil
	case CompressionNone, CompressionGzip:
		return c, nil
	}
	return "", fmt.Errorf("unknown compression %q: use none or gzip", s)
}
