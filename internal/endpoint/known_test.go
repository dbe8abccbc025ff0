package endpoint

import "testing"

func TestDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"ordr", "order", 1}, {"oredr", "order", 1}, {"kitten", "sitting", 3}, {"ca", "abc", 3}} {
		if got := distance(tt.a, tt.b); got != tt.d {
			t.Errorf("distance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.d)
		}
	}
}
