package portal

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
)

// The pages work from the keyboard and name every control (issue 36, point 3): on each page
// Tab reaches every link, button and field, in the order they stand, and the focused one shows
// a focus ring; Enter on a focused link follows it; and no control lacks a name a screen reader
// can read (a label, its text, or aria-label).
func TestPortalByKeyboard(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium against a relay: not in -short")
	}
	s := newSite(t)
	s.operator(http.MethodPut, "/event-types/order.created", map[string]any{
		"description": "A customer placed an order.", "example": map[string]any{"order_id": "o-1"}})
	recv := newReceiver(t)
	kb := newTab(t, "keyboard")
	kb.open(s.link("acme", 15*time.Minute))
	kb.see("Endpoints")
	kb.byKeyboard("the endpoints list (empty)")

	kb.submit("link", "Add an endpoint")
	kb.byKeyboard("the add form")
	kb.typeIn("URL", recv.URL+"/hooks")
	kb.click("checkbox", "order.created")
	kb.submit("button", "Add the endpoint")
	kb.see("shown this once")
	kb.byKeyboard("the new endpoint's secret")
	id := strings.TrimSuffix(strings.TrimPrefix(kb.eval(`document.querySelector("h1").innerText`), "Endpoint "), " added")

	// Enter on a focused link follows it, as a click does.
	kb.open(s.srv.URL + "/portal/")
	kb.focusLink(id)
	kb.key("Enter", "Enter", 13)
	waitFor(t, "Enter on the focused link to follow it", func() bool {
		return strings.Contains(kb.eval(`location.pathname + (document.readyState === "complete" ? " loaded" : "")`), id+" loaded")
	})
	kb.see("Deliveries")
	kb.byKeyboard("the endpoint page")

	// The operator console, the same way.
	ops := newTab(t, "keyboard-operator")
	ops.open(s.srv.URL + "/console/")
	ops.byKeyboard("the console's sign-in")
	ops.typeIn("Operator token", opToken)
	ops.submit("button", "Sign in")
	ops.see("Every endpoint", id)
	ops.byKeyboard("the console's endpoints")
	ops.submit("link", "Find an event")
	ops.byKeyboard("the console's event search")
	ops.submit("link", "Pipelines")
	ops.byKeyboard("the console's pipelines")
}

// byKeyboard checks the page by keyboard: every control named, Tab visiting each focusable
// control once in document order with a focus ring shown, then leaving the page's controls.
func (b *tab) byKeyboard(page string) {
	b.t.Helper()
	if unnamed := b.eval(`(() => {
		const name = el => {
			if (el.getAttribute("aria-label")) return el.getAttribute("aria-label");
			const by = el.getAttribute("aria-labelledby");
			if (by) return by.split(/\s+/).map(id => (document.getElementById(id) || {}).textContent || "").join(" ");
			if (el.labels && el.labels.length) return Array.from(el.labels).map(l => l.textContent).join(" ");
			if (el.matches("a, button, summary")) return el.textContent;
			if (el.matches("input[type=submit], input[type=button]")) return el.value;
			return el.getAttribute("title") || "";
		};
		return Array.from(document.querySelectorAll("a[href], button, summary, input:not([type=hidden]), select, textarea"))
			.filter(el => el.getClientRects().length && !name(el).trim())
			.map(el => el.outerHTML.slice(0, 120)).join("\n");
	})()`); unnamed != "" {
		b.t.Fatalf("%s: controls without a name a screen reader reads:\n%s", page, unnamed)
	}
	// The controls Tab must reach, numbered in document order: visible, enabled, not taken out
	// of the tab order. (A radio group is one stop; the pages have none.)
	n, err := strconv.Atoi(b.eval(`(() => {
		const els = Array.from(document.querySelectorAll("a[href], button, summary, input:not([type=hidden]), select, textarea"))
			.filter(el => el.getClientRects().length && !el.disabled && el.tabIndex >= 0 && !el.closest("details:not([open]) > :not(summary)"));
		els.forEach((el, i) => el.dataset.kb = i);
		// Tab starts from the top of the page, whatever had the focus (an autofocused field):
		document.body.tabIndex = -1; document.body.focus(); document.body.removeAttribute("tabindex");
		window.getSelection().removeAllRanges();
		return String(els.length);
	})()`))
	if err != nil || n == 0 {
		b.t.Fatalf("%s: %d controls to reach (%v)", page, n, err)
	}
	want := 0
	for range 4*n + 3 {
		b.key("Tab", "Tab", 9)
		var at struct {
			KB    string `json:"kb"`
			Ring  bool   `json:"ring"`
			Where string `json:"where"`
		}
		if err := json.Unmarshal([]byte(b.eval(`(() => {
			const el = document.activeElement, st = el && getComputedStyle(el);
			return JSON.stringify({kb: (el && el.dataset.kb) || "", where: el ? el.outerHTML.slice(0, 100) : "",
				ring: !!st && ((st.outlineStyle !== "none" && parseFloat(st.outlineWidth) > 0) || st.boxShadow !== "none")});
		})()`)), &at); err != nil {
			b.t.Fatal(err)
		}
		if at.KB == "" || at.KB == strconv.Itoa(want-1) {
			// the browser's own stops (the page itself), or the next part of the same control
			// (a date and time input takes a Tab per field)
			continue
		}
		if at.KB != strconv.Itoa(want) {
			b.t.Fatalf("%s: Tab went to control %s (%s), want control %d of %d in document order", page, at.KB, at.Where, want, n)
		}
		if !at.Ring {
			b.t.Fatalf("%s: control %s (%s) has the focus without a visible focus ring", page, at.KB, at.Where)
		}
		if want++; want == n {
			b.t.Logf("%s: Tab reached its %d controls in order, each with a focus ring", page, n)
			return
		}
	}
	b.t.Fatalf("%s: Tab reached %d of the page's %d controls", page, want, n)
}

// focusLink gives the focus to the link whose text contains part, as Tab would.
func (b *tab) focusLink(part string) {
	b.t.Helper()
	b.eval(`(() => {
		const a = Array.from(document.querySelectorAll("a[href]")).find(a => a.textContent.includes(` + strconv.Quote(part) + `));
		if (!a) throw new Error("no link containing ` + part + `");
		a.focus();
		return "";
	})()`)
}

// key presses and releases one key with the keyboard.
func (b *tab) key(key, code string, vk int64) {
	b.t.Helper()
	b.do(func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeRawKeyDown, input.DispatchKeyEventTypeKeyUp} {
			p := input.DispatchKeyEventParams{Type: typ, Key: key, Code: code, WindowsVirtualKeyCode: vk, NativeVirtualKeyCode: vk}
			if key == "Enter" && typ == input.DispatchKeyEventTypeRawKeyDown {
				p.Type, p.Text = input.DispatchKeyEventTypeKeyDown, "\r"
			}
			if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, p); err != nil {
				return chromedp.Void{}, err
			}
		}
		return chromedp.Void{}, nil
	})
}
