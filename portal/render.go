package portal

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// staticFiles serves the style sheet, the script and the icon, which a browser may keep a day.
func staticFiles() http.Handler {
	sub, _ := fs.Sub(staticFS, "static")
	files := http.FileServer(http.FS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") || r.URL.Path == "" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=86400")
		files.ServeHTTP(w, r)
	})
}

// pages are the parsed templates: each page is layout.html with the page's own file.
type pages struct {
	byName map[string]*template.Template
}

var funcs = template.FuncMap{
	"when":    when,
	"ago":     ago,
	"percent": percent,
	"join":    strings.Join,
	"deref":   deref,
	"ms":      func(n int) string { return fmt.Sprintf("%d ms", n) },
	"short":   short,
	"bytes":   byteSize,
	"fieldError": func(e *apiError, name string) string {
		if e == nil {
			return ""
		}
		return e.field(name)
	},
	"has": func(list []string, s string) bool {
		for _, x := range list {
			if x == s {
				return true
			}
		}
		return false
	},
}

func loadPages() (*pages, error) {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("portal: parse the layout: %w", err)
	}
	pg := &pages{byName: map[string]*template.Template{}}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(templateFS, n)
		if err != nil {
			return nil, fmt.Errorf("portal: parse %s: %w", n, err)
		}
		pg.byName[name] = t
	}
	return pg, nil
}

// view is what every page's template gets.
type view struct {
	Area    area
	Site    string // Config.Title
	Title   string
	Signed  bool   // a session is signed in: the header shows who and the sign-out
	Who     string // the tenant or the operator
	CSRF    string
	Error   *apiError // a refused change, shown above the form and beside its fields
	Notice  string    // what the last change did
	Data    any
	Console bool
	Base    string
}

// render writes page name with v, status first; a template that fails writes nothing of it.
func (p *Portal) render(w http.ResponseWriter, status int, name string, v view) {
	v.Site, v.Base, v.Console = p.cfg.Title, v.Area.base, v.Area.operator
	t := p.pages.byName[name]
	var buf bytes.Buffer
	if t == nil {
		p.cfg.Logger.Error().Str("page", name).Msg("portal: no such template")
		http.Error(w, "the page could not be shown", http.StatusInternalServerError)
		return
	}
	if err := t.ExecuteTemplate(&buf, "layout.html", v); err != nil {
		p.cfg.Logger.Error().Err(err).Str("page", name).Msg("portal: template failed")
		http.Error(w, "the page could not be shown", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// signedView is the view of a signed-in page.
func (q req) view(title string, data any) view {
	who := q.s.who.Tenant
	if q.s.who.Operator {
		who = q.s.who.Name
	}
	return view{Area: q.area, Title: title, Signed: true, Who: who, CSRF: q.s.csrf, Data: data}
}

func when(t any) string {
	switch v := t.(type) {
	case time.Time:
		if v.IsZero() {
			return "—"
		}
		return v.UTC().Format("2006-01-02 15:04:05 UTC")
	case *time.Time:
		if v == nil || v.IsZero() {
			return "—"
		}
		return v.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	return "—"
}

// ago says how long ago t was, in the largest unit that fits.
func ago(t any) string {
	var v time.Time
	switch x := t.(type) {
	case time.Time:
		v = x
	case *time.Time:
		if x == nil {
			return ""
		}
		v = *x
	}
	if v.IsZero() {
		return ""
	}
	d := time.Since(v)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h ago", int(d.Hours()))
	}
	return fmt.Sprintf("%d days ago", int(d.Hours()/24))
}

// percent is ok out of ok+failed, or "—" for none.
func percent(ok, failed int64) string {
	if ok+failed == 0 {
		return "—"
	}
	v := 100 * float64(ok) / float64(ok+failed)
	if v > 99.9 && failed > 0 {
		return "99.9%"
	}
	return fmt.Sprintf("%.*f%%", map[bool]int{true: 0, false: 1}[v == math.Trunc(v)], v)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// short cuts s to n characters.
func short(n int, s string) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// byteSize says n bytes in the largest unit that keeps a number above one.
func byteSize(n *int64) string {
	if n == nil {
		return "—"
	}
	v := float64(*n)
	for _, u := range []string{"B", "kB", "MB", "GB"} {
		if v < 1000 || u == "GB" {
			if u == "B" {
				return fmt.Sprintf("%d B", *n)
			}
			return fmt.Sprintf("%.1f %s", v, u)
		}
		v /= 1000
	}
	return ""
}

// queryURL is a page's query string for an href: url.Values encodes it, so it is safe as it is.
func queryURL(v url.Values) template.URL { return template.URL(v.Encode()) }
