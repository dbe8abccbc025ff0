package portal

import (
	"fmt"
	"net/http"
	"strings"
)

// securityHeaders are the headers of every answer: a Content-Security-Policy that lets a page
// load only the portal's own script, style sheet and images (no inline script or style, no
// other origin), post forms only to itself, and be framed only by frameAncestors; no
// Referer sent anywhere (a link's token must not leave in one); no caching of a page (a page
// may show a secret once).
func securityHeaders(frameAncestors string) http.Header {
	h := http.Header{}
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors "+frameAncestors)
	if frameAncestors == "'none'" {
		h.Set("X-Frame-Options", "DENY") // for browsers that ignore frame-ancestors
	}
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	return h
}

// frameAncestors checks Config.FrameAncestors and returns the directive's value: 'none' when
// empty. A source is an origin (https://app.example, https://*.example.com), 'self', or a
// scheme (https:); nothing that could end the directive or add another.
func frameAncestors(sources []string) (string, error) {
	if len(sources) == 0 {
		return "'none'", nil
	}
	for _, s := range sources {
		if s == "'self'" {
			continue
		}
		ok := s != "" && !strings.ContainsAny(s, " \t\r\n;,'\"") &&
			(strings.HasPrefix(s, "https://") || strings.HasPrefix(s, "http://") || s == "https:" || s == "http:")
		if !ok {
			return "", fmt.Errorf("FrameAncestors %q: give origins such as https://app.example (or 'self'), "+
				"one per entry, without spaces, commas or semicolons", s)
		}
	}
	return strings.Join(sources, " "), nil
}
