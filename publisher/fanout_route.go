package publisher

import (
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/endpoint"
)

// router indexes the endpoints that may receive events by tenant, so that routing an event
// looks at the endpoints of its tenant and those without one, not at every endpoint. It is
// rebuilt after a change (rare), before the next event is routed; only Run's goroutine uses it.
type router struct {
	dirty    bool
	any      []*lane            // endpoints without a tenant: every tenant's events
	byTenant map[string][]*lane // endpoints of one tenant
}

func (r *router) build(f *Fanout) {
	if !r.dirty && r.byTenant != nil {
		return
	}
	r.dirty = false
	r.any, r.byTenant = r.any[:0], map[string][]*lane{}
	for _, l := range f.lanes {
		if l.pub == nil || l.row.State == endpoint.Disabled {
			continue
		}
		if l.row.TenantID == "" {
			r.any = append(r.any, l)
		} else {
			r.byTenant[l.row.TenantID] = append(r.byTenant[l.row.TenantID], l)
		}
	}
}

// match appends the lanes of candidates whose subscription takes m.
func (r *router) match(dst, candidates []*lane, m *envelope.Message) []*lane {
	for _, l := range candidates {
		if l.row.Subscribed(m.TenantID, m.EventType, m.AggregateType) {
			dst = append(dst, l)
		}
	}
	return dst
}
