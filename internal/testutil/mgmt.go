package testutil

import (
	"net/http"
	"testing"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/metrics"
	"github.com/railmq/railmq/mgmt"
)

// Management makes srv's management API (mgmt.New), closed when the test
// ends, before a broker started by this package shuts down.
func Management(t testing.TB, srv *broker.Server, opts mgmt.Options) *mgmt.API {
	t.Helper()
	api := mgmt.New(srv, opts)
	t.Cleanup(api.Close)
	return api
}

// Management is the in-process broker's management API: made with opts
// by the first call (or by ManagementHandler's, with none), closed when
// the test ends. A later call with other options fails the test: set
// them before anything serves the API.
func (b *Broker) Management(opts mgmt.Options) *mgmt.API {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Server == nil {
		b.t.Fatal("the management API needs the in-process broker")
	}
	if b.api == nil {
		b.api = Management(b.t, b.Server, opts)
		b.apiOpts = opts
	} else if opts != b.apiOpts {
		b.t.Fatalf("management API made with %+v, asked again with %+v", b.apiOpts, opts)
	}
	return b.api
}

// ManagementHandler serves the in-process broker's management API and
// console (Management's, with default options unless set before).
func (b *Broker) ManagementHandler() http.Handler {
	b.t.Helper()
	b.mu.Lock()
	api := b.api
	b.mu.Unlock()
	if api == nil {
		api = b.Management(mgmt.Options{})
	}
	return api.Handler()
}

// PrometheusHandler serves the in-process broker's metrics, with the
// consumer utilisation its management API samples.
func (b *Broker) PrometheusHandler() http.Handler {
	b.t.Helper()
	b.mu.Lock()
	api := b.api
	b.mu.Unlock()
	if api == nil {
		api = b.Management(mgmt.Options{})
	}
	return metrics.Handler(b.Server, metrics.Options{Utilisation: api.ConsumerUtilisation})
}
