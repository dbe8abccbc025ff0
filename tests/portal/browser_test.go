// Package portal drives the partner portal and the operator console in a real browser:
// headless Chromium (Debian's package, /usr/bin/chromium) through chromedp, against a relay run
// in this process and real receivers. Controls are found by their accessible names (the text of
// their label, of a button or a link), as a person or a screen reader finds them, never by CSS
// selectors.
package portal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// chromium is the browser the tests drive: CHROMIUM, else Debian's package.
func chromium() (string, error) {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p, nil
	}
	return "", errors.New("no Chromium: install it (apt-get install -y chromium), or set CHROMIUM to its path")
}

// The one browser of the package: started by the first test that needs it, closed by TestMain.
var shared struct {
	once   sync.Once
	ctx    context.Context
	cancel func()
	dir    string
	err    error
}

func closeBrowser() {
	if shared.cancel != nil {
		shared.cancel()
	}
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
}

func browserContext(t *testing.T) context.Context {
	t.Helper()
	shared.once.Do(func() {
		path, err := chromium()
		if err != nil {
			shared.err = err
			return
		}
		if shared.dir, err = os.MkdirTemp("", "portal-chromium-"); err != nil {
			shared.err = err
			return
		}
		// The machine's network is closed: without these flags Chromium waits on refused
		// connections of its own (updates, sync, QUIC probes).
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(path), chromedp.Headless,
			chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
			chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
			chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(shared.dir), chromedp.WindowSize(1100, 800))
		ctx, cancelBrowser := chromedp.NewContext(alloc)
		if _, err := chromedp.Run(ctx, chromedp.Title()); err != nil { // starts the browser
			shared.err = fmt.Errorf("start %s: %w", path, err)
		}
		shared.ctx, shared.cancel = ctx, func() { cancelBrowser(); cancelAlloc() }
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.ctx
}

// tab is a tab in a browser context of its own: its own cookies, so two tabs are two people.
type tab struct {
	t      *testing.T
	ctx    context.Context
	shots  int
	prefix string
}

func newTab(t *testing.T, name string) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browserContext(t), chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	tb := &tab{t: t, ctx: ctx, prefix: name}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1100, 800)); err != nil {
		t.Fatal(err)
	}
	// A confirmation (window.confirm, the pages' script) is accepted, as a person would.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	return tb
}

// do runs actions, failing the test on an error.
func (b *tab) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatal(err)
	}
}

// open navigates to u and waits for its load.
func (b *tab) open(u string) {
	b.t.Helper()
	b.do(chromedp.Navigate(u))
}

// text is the page's visible text.
func (b *tab) text() string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		b.t.Fatal(err)
	}
	return s
}

// see fails unless the page shows each of texts.
func (b *tab) see(texts ...string) {
	b.t.Helper()
	page := b.text()
	for _, s := range texts {
		if !strings.Contains(page, s) {
			b.t.Fatalf("the page does not show %q:\n%s", s, page)
		}
	}
}

// location is the page's address.
func (b *tab) location() string {
	b.t.Helper()
	u, err := chromedp.Run(b.ctx, chromedp.Location())
	if err != nil {
		b.t.Fatal(err)
	}
	return u
}

// node finds the control with this role and accessible name, waiting up to 10s for it.
func node(ctx context.Context, role, name string) (cdp.BackendNodeID, error) {
	if role == "" {
		return nodeWhere(ctx, "", func(n string) bool { return n == name }, "named "+name)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		doc, err := chromedp.Call(ctx, dom.GetDocument, dom.GetDocumentParams{Depth: new(int64(0))})
		if err == nil {
			var res accessibility.QueryAXTreeResult
			res, err = chromedp.Call(ctx, accessibility.QueryAXTree, accessibility.QueryAXTreeParams{NodeID: doc.Root.NodeID,
				AccessibleName: name, Role: role})
			if err == nil {
				for _, n := range res.Nodes {
					if !n.Ignored && n.BackendDOMNodeID != 0 {
						return n.BackendDOMNodeID, nil
					}
				}
				err = fmt.Errorf("no %s named %q on the page", role, name)
			}
		}
		if time.Now().After(deadline) {
			return 0, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// nodeWhere finds the first node of role whose accessible name satisfies match (role "": any
// role but text and labels), waiting up to 10s for it.
func nodeWhere(ctx context.Context, role string, match func(string) bool, what string) (cdp.BackendNodeID, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		doc, err := chromedp.Call(ctx, dom.GetDocument, dom.GetDocumentParams{Depth: new(int64(0))})
		if err == nil {
			var res accessibility.QueryAXTreeResult
			res, err = chromedp.Call(ctx, accessibility.QueryAXTree, accessibility.QueryAXTreeParams{NodeID: doc.Root.NodeID,
				Role: role})
			if err == nil {
				for _, n := range res.Nodes {
					if n.Ignored || n.BackendDOMNodeID == 0 || n.Name == nil || n.Role == nil {
						continue
					}
					r := strings.Trim(string(n.Role.Value), `"`)
					if role == "" && (r == "LabelText" || r == "StaticText" || r == "InlineTextBox" || r == "generic" ||
						r == "paragraph" || r == "none") {
						continue
					}
					if match(strings.Trim(string(n.Name.Value), `"`)) {
						return n.BackendDOMNodeID, nil
					}
				}
				err = fmt.Errorf("no %s %s on the page", role, what)
			}
		}
		if time.Now().After(deadline) {
			return 0, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// clickContaining clicks the first control of role whose name contains part.
func (b *tab) clickContaining(role, part string) {
	b.t.Helper()
	b.do(func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		id, err := nodeWhere(ctx, role, func(n string) bool { return strings.Contains(n, part) }, "naming "+part)
		if err != nil {
			return chromedp.Void{}, err
		}
		return clickNode(ctx, t, id)
	})
}

// click clicks the control of that role and name with the mouse, at its centre, as a person
// does (so a copy to the clipboard has the user's gesture it needs).
func (b *tab) click(role, name string) {
	b.t.Helper()
	b.do(clickAction(role, name))
}

func clickAction(role, name string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		id, err := node(ctx, role, name)
		if err != nil {
			return chromedp.Void{}, err
		}
		return clickNode(ctx, t, id)
	}
}

func clickNode(ctx context.Context, t *chromedp.Target, id cdp.BackendNodeID) (chromedp.Void, error) {
	{
		if _, err := cdp.Call(ctx, t, dom.ScrollIntoViewIfNeeded, dom.ScrollIntoViewIfNeededParams{BackendNodeID: id}); err != nil {
			return chromedp.Void{}, err
		}
		box, err := cdp.Call(ctx, t, dom.GetBoxModel, dom.GetBoxModelParams{BackendNodeID: id})
		if err != nil {
			return chromedp.Void{}, err
		}
		q := box.Model.Border
		x, y := (q[0]+q[2]+q[4]+q[6])/4, (q[1]+q[3]+q[5]+q[7])/4
		return chromedp.MouseClickXY(x, y)(ctx, t)
	}
}

// submit clicks the button (or link) and waits for the page it leads to.
func (b *tab) submit(role, name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, clickAction(role, name))); err != nil {
		b.t.Fatalf("%s %q: %v", role, name, err)
	}
}

// call runs fn (a JavaScript function of the element) on the control named name.
func (b *tab) call(role, name, fn string, args ...any) {
	b.t.Helper()
	b.do(func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		id, err := node(ctx, role, name)
		if err != nil {
			return chromedp.Void{}, err
		}
		obj, err := cdp.Call(ctx, t, dom.ResolveNode, dom.ResolveNodeParams{BackendNodeID: id})
		if err != nil {
			return chromedp.Void{}, err
		}
		var callArgs []*runtime.CallArgument
		for _, a := range args {
			v, err := jsonValue(a)
			if err != nil {
				return chromedp.Void{}, err
			}
			callArgs = append(callArgs, &runtime.CallArgument{Value: v})
		}
		_, err = cdp.Call(ctx, t, runtime.CallFunctionOn, runtime.CallFunctionOnParams{FunctionDeclaration: fn,
			ObjectID: obj.Object.ObjectID, Arguments: callArgs})
		return chromedp.Void{}, err
	})
}

// typeIn types s into the text box labelled label, with the keyboard, after clearing it.
func (b *tab) typeIn(label, s string) {
	b.t.Helper()
	b.call("textbox", label, `function() { this.value = ""; this.focus(); }`)
	b.do(func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, input.InsertText, input.InsertTextParams{Text: s})
		return chromedp.Void{}, err
	})
}

// choose selects the option whose text starts with option in the list labelled label.
func (b *tab) choose(label, option string) {
	b.t.Helper()
	b.call("combobox", label, `function(o) {
		const opt = Array.from(this.options).find(x => x.text.startsWith(o));
		if (!opt) throw new Error("no option " + o);
		this.value = opt.value;
		this.dispatchEvent(new Event("change", {bubbles: true}));
	}`, option)
}

// setField sets an input that is no text box (a date and time) labelled label.
func (b *tab) setField(label, value string) {
	b.t.Helper()
	b.call("", label, `function(v) { this.value = v; this.dispatchEvent(new Event("change", {bubbles: true})); }`, value)
}

// shot saves a screenshot of the whole page as <n>-<name>.png in the test's artifact directory,
// and in docs/images/portal with -update.
func (b *tab) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatal(err)
	}
	b.shots++
	file := fmt.Sprintf("%s-%02d-%s.png", b.prefix, b.shots, name)
	if err := os.WriteFile(filepath.Join(b.t.ArtifactDir(), file), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "images", "portal", name+".png"), png, 0o644); err != nil {
			b.t.Fatal(err)
		}
	}
}

// narrow shows the page as a 375 px wide phone does and fails when it is wider than that (a
// page that scrolls sideways).
func (b *tab) narrow(f func()) {
	b.t.Helper()
	b.do(chromedp.EmulateViewport(375, 740, chromedp.EmulateMobile))
	defer b.do(chromedp.EmulateViewport(1100, 800))
	f()
}

func (b *tab) fitsWidth() {
	b.t.Helper()
	w, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
	if err != nil {
		b.t.Fatal(err)
	}
	if w > 375 {
		b.t.Fatalf("%s is %d px wide at a 375 px viewport: it scrolls sideways", b.location(), w)
	}
}

// grantClipboard lets the pages of origin write and read the clipboard, as a person's click on
// Copy does.
func (b *tab) grantClipboard(origin string) {
	b.t.Helper()
	for _, name := range []string{"clipboard-read", "clipboard-write"} {
		if _, err := chromedp.CallBrowser(b.ctx, browser.SetPermission, browser.SetPermissionParams{
			Permission: &browser.PermissionDescriptor{Name: name}, Setting: browser.PermissionSettingGranted, Origin: origin,
			BrowserContextID: chromedp.FromContext(b.ctx).BrowserContextID}); err != nil {
			b.t.Fatal(err)
		}
	}
}

// jsonValue is v as a raw JSON argument of a function call.
func jsonValue(v any) (jsonv2.Value, error) {
	b, err := json.Marshal(v)
	return jsonv2.Value(b), err
}

// eval evaluates a JavaScript expression (a promise is awaited) to a string.
func (b *tab) eval(expr string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("%s: %v", expr, err)
	}
	return s
}
