package catalog

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

var shop = []Type{
	{Name: "order.created"}, {Name: "order.updated"}, {Name: "order.item.added"},
	{Name: "order.cancelled", Deprecated: true, ReplacedBy: "order.canceled"}, {Name: "order.canceled"},
	{Name: "invoice.paid"}, {Name: "invoice.voided"}, {Name: "customer.created"},
	{Name: "legacy.ping", Deprecated: true}, {Name: "legacy.pong", Deprecated: true},
}

// Known answers of the suggestions: typos within the distance, prefixes, case, and nothing when
// nothing is near.
func TestSuggestKnownAnswers(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
	}{
		{"ordr.created", []string{"order.created"}},                       // a letter left out
		{"oredr.created", []string{"order.created"}},                      // two letters swapped
		{"Order.Created", []string{"order.created"}},                      // case
		{"order.create", []string{"order.created"}},                       // a letter left out; order.updated is 4 away
		{"order.cancel", []string{"order.canceled", "order.cancelled"}},   // 2, and cancelled at 3 is within one of it
		{"order.canceled", []string{"order.canceled", "order.cancelled"}}, // itself first, at 0
		{"invoice.payed", []string{"invoice.paid"}},
		{"order", []string{"order.*"}}, // the start of some names: the prefix pattern
		{"ordr.*", []string{"order.*"}},
		{"invoices.*", []string{"invoice.*"}},
		{"order.itm.*", []string{"order.item.*"}},
		{"shipment.created", nil}, // nothing near: no guess
		{"zzz.*", nil},
	} {
		if got := Suggest(tt.in, shop); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Suggest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestCheckPatterns(t *testing.T) {
	for _, tt := range []struct {
		name     string
		patterns []string
		refused  []string // the patterns refused, in order
		warn     string   // a warning that must be given ("" none)
		saying   string
	}{
		{"an empty catalog checks nothing", nil, nil, "", ""},
		{"exact, prefix and * that match", []string{"order.created", "invoice.*", "*"}, nil, "", ""},
		{"a typo", []string{"ordr.created"}, []string{"ordr.created"}, "", "did you mean order.created?"},
		{"a prefix that matches nothing", []string{"order.created", "shipment.*"}, []string{"shipment.*"}, "", "event-types list"},
		{"two unknown", []string{"ordr.created", "invoice.payed"}, []string{"ordr.created", "invoice.payed"}, "", "invoice.paid"},
		{"only deprecated: a warning", []string{"order.cancelled"}, nil, "order.cancelled (use order.canceled)", ""},
		{"a prefix of deprecated only", []string{"legacy.*"}, nil, `"legacy.*" matches only deprecated types: legacy.ping, legacy.pong`, ""},
		{"deprecated beside live: no warning", []string{"order.*"}, nil, "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			types := shop
			if tt.patterns == nil {
				types, tt.patterns = nil, []string{"anything.at.all"}
			}
			warnings, err := CheckPatterns(types, tt.patterns)
			var refused []string
			for _, p := range tt.patterns {
				var u *UnknownPatternError
				for _, e := range unwrapAll(err) {
					if errors.As(e, &u) && u.Pattern == p {
						refused = append(refused, p)
					}
				}
			}
			if !reflect.DeepEqual(refused, tt.refused) {
				t.Fatalf("refused %q, want %q (err %v)", refused, tt.refused, err)
			}
			if err != nil && (!errors.Is(err, ErrUnknownType) || !strings.Contains(err.Error(), tt.saying)) {
				t.Errorf("error %q: want ErrUnknownType saying %q", err, tt.saying)
			}
			if got := strings.Join(warnings, "\n"); (tt.warn == "") != (got == "") || !strings.Contains(got, tt.warn) {
				t.Errorf("warnings %q, want one saying %q", warnings, tt.warn)
			}
		})
	}
}

func unwrapAll(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}
