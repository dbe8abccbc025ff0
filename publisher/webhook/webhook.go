// Package webhook is the old import path of destination/webhook, kept for one release.
//
// Deprecated: import github.com/outbox-relay/outbox-relay/destination/webhook.
package webhook

import (
	"net/url"

	"github.com/outbox-relay/outbox-relay/destination/webhook"
)

// The names of destination/webhook.
type (
	Config        = webhook.Config
	Destination   = webhook.Destination
	Format        = webhook.Format
	Compression   = webhook.Compression
	RedirectError = webhook.RedirectError
)

// The formats and compressions of destination/webhook.
const (
	FormatRaw         = webhook.FormatRaw
	FormatCloudEvents = webhook.FormatCloudEvents
	CompressionNone   = webhook.CompressionNone
	CompressionGzip   = webhook.CompressionGzip
)

// New is webhook.New.
func New(cfg Config) (*Destination, error) { return webhook.New(cfg) }

// ParseFormat is webhook.ParseFormat.
func ParseFormat(s string) (Format, error) { return webhook.ParseFormat(s) }

// ParseCompression is webhook.ParseCompression.
func ParseCompression(s string) (Compression, error) { return webhook.ParseCompression(s) }

// ParseURL is webhook.ParseURL.
func ParseURL(raw string) (*url.URL, error) { return webhook.ParseURL(raw) }
