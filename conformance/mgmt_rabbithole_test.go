package conformance

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	rabbithole "github.com/michaelklishin/rabbit-hole/v2"
	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// rabbit-hole, RabbitMQ's Go management client, drives the connections,
// channels, global parameters, cluster name, feature flags, health
// checks, queue actions, topic permissions, per-vhost definitions and
// paged lists with its own calls and reads what railmq answers into its
// own types, as it does RabbitMQ's. Also run against RabbitMQ 3.10.8
// (RAILMQ_TEST_URL, RAILMQ_TEST_MGMT_URL), where it passes too; the
// cluster name is put back.
func TestRabbitHoleConnectionsParametersAndChecks(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	base := os.Getenv("RAILMQ_TEST_MGMT_URL")
	if testutil.ExternalURL() == "" {
		hs := httptest.NewServer(b.ManagementHandler())
		t.Cleanup(hs.Close)
		base = hs.URL
	} else if base == "" {
		base = "http://127.0.0.1:15673"
	}
	rh, err := rabbithole.NewTLSClient(base, "guest", "guest", &http.Transport{DisableKeepAlives: true})
	must(t, err)
	done := func(what string) func(*http.Response, error) {
		return func(res *http.Response, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			res.Body.Close()
		}
	}
	conn, err := rmq.DialConfig(b.URL, rmq.Config{Properties: rmq.Table{"connection_name": "rh-conn"}})
	must(t, err)
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	must(t, err)
	q, err := ch.QueueDeclare("", false, false, true, false, nil)
	must(t, err)
	must(t, ch.Publish("", q.Name, false, false, rmq.Publishing{Body: []byte("x")}))
	_, port, _ := net.SplitHostPort(conn.LocalAddr().String())

	// Connections and channels, in rabbit-hole's types.
	var ci rabbithole.ConnectionInfo
	testutil.Eventually(t, 30*time.Second, func() bool {
		cs, err := rh.ListConnections()
		must(t, err)
		for _, c := range cs {
			if strconv.Itoa(int(c.PeerPort)) == port && c.Channels == 1 {
				ci = c
			}
		}
		return ci.Name != ""
	}, "rabbit-hole ListConnections: connection from port %s with 1 channel", port)
	if ci.ClientProperties["connection_name"] != "rh-conn" || ci.UsesTLS || ci.Protocol != "AMQP 0-9-1" || ci.Host == "" || int(ci.Port) == 0 || ci.SendOct == 0 || ci.RecvOct == 0 {
		t.Errorf("ListConnections: %+v", ci)
	}
	one, err := rh.GetConnection(ci.Name)
	must(t, err)
	if one.Name != ci.Name || one.Channels != 1 {
		t.Errorf("GetConnection: %+v", one)
	}
	vcs, err := rh.ListVhostConnections("/")
	must(t, err)
	if !hasConn(vcs, ci.Name) {
		t.Errorf("ListVhostConnections(/): %+v", vcs)
	}
	var chi *rabbithole.ChannelInfo
	testutil.Eventually(t, 30*time.Second, func() bool {
		chi, err = rh.GetChannel(ci.Name + " (1)")
		return err == nil && chi.Number == 1
	}, "rabbit-hole GetChannel: %v", err)
	if chi.User != "guest" || chi.Vhost != "/" || chi.ConnectionDetails.Name != ci.Name {
		t.Errorf("GetChannel: %+v", chi)
	}
	chs, err := rh.ListChannels()
	must(t, err)
	if len(chs) == 0 {
		t.Error("ListChannels: none")
	}

	// Global parameters and the cluster name.
	done("PutGlobalParameter")(rh.PutGlobalParameter("rh-global", map[string]any{"a": "b"}))
	gp, err := rh.GetGlobalParameter("rh-global")
	must(t, err)
	if gp.Name != "rh-global" {
		t.Errorf("GetGlobalParameter: %+v", gp)
	}
	gps, err := rh.ListGlobalParameters()
	must(t, err)
	if len(gps) < 2 {
		t.Errorf("ListGlobalParameters: %+v", gps)
	}
	done("DeleteGlobalParameter")(rh.DeleteGlobalParameter("rh-global"))
	cn, err := rh.GetClusterName()
	must(t, err)
	_, hadName := rh.GetGlobalParameter("cluster_name")
	t.Cleanup(func() {
		if hadName == nil {
			if res, err := rh.SetClusterName(*cn); err == nil {
				res.Body.Close()
			}
		} else if res, err := rh.DeleteGlobalParameter("cluster_name"); err == nil {
			res.Body.Close()
		}
	})
	done("SetClusterName")(rh.SetClusterName(rabbithole.ClusterName{Name: "rh-cluster"}))
	if cn2, err := rh.GetClusterName(); err != nil || cn2.Name != "rh-cluster" {
		t.Errorf("GetClusterName after SetClusterName: %+v %v", cn2, err)
	}
	// An unknown component is a 400.
	if _, err := rh.PutRuntimeParameter("rh-nope", "/", "x", map[string]any{"a": 1}); err == nil {
		t.Error("PutRuntimeParameter of an unknown component: no error")
	} else if e, ok := err.(rabbithole.ErrorResponse); !ok || e.StatusCode != 400 {
		t.Errorf("PutRuntimeParameter of an unknown component: %v", err)
	}

	// Feature flags and health checks.
	ffs, err := rh.ListFeatureFlags()
	must(t, err)
	enabled := 0
	for _, f := range ffs {
		if f.State == rabbithole.StateEnabled && f.Stability == rabbithole.StabilityStable {
			enabled++
		}
	}
	if len(ffs) < 9 || enabled < 7 {
		t.Errorf("ListFeatureFlags: %+v", ffs)
	}
	done("EnableFeatureFlag")(rh.EnableFeatureFlag("quorum_queue"))
	for what, check := range map[string]func() (rabbithole.HealthCheckStatus, error){
		"certificate-expiration": func() (rabbithole.HealthCheckStatus, error) {
			return rh.HealthCheckCertificateExpiration(1, rabbithole.DAYS)
		},
		"quorum-critical":      rh.HealthCheckNodeIsQuorumCritical,
		"mirror-sync-critical": rh.HealthCheckNodeIsMirrorSyncCritical,
	} {
		if st, err := check(); err != nil || !st.Ok() {
			t.Errorf("health check %s: %+v %v", what, st, err)
		}
	}

	// Queue actions, one exchange's topic permission, a vhost's
	// definitions, a paged list.
	done("SyncQueue")(rh.SyncQueue("/", q.Name))
	done("CancelSyncQueue")(rh.CancelSyncQueue("/", q.Name))
	done("PutUser")(rh.PutUser("rh-tp", rabbithole.UserSettings{Password: "pw"}))
	t.Cleanup(func() {
		if res, err := rh.DeleteUser("rh-tp"); err == nil {
			res.Body.Close()
		}
	})
	for _, x := range []string{"amq.topic", "rh-x"} {
		done("UpdateTopicPermissionsIn")(rh.UpdateTopicPermissionsIn("/", "rh-tp", rabbithole.TopicPermissions{Exchange: x, Write: ".*", Read: ".*"}))
	}
	done("DeleteTopicPermissionsIn")(rh.DeleteTopicPermissionsIn("/", "rh-tp", "rh-x"))
	tps, err := rh.GetTopicPermissionsIn("/", "rh-tp")
	must(t, err)
	if len(tps) != 1 || tps[0].Exchange != "amq.topic" {
		t.Errorf("after DeleteTopicPermissionsIn(rh-x): %+v", tps)
	}
	defs, err := rh.ListVhostDefinitions("/")
	must(t, err)
	if defs.Users != nil || defs.Vhosts != nil || defs.Permissions != nil || defs.Queues == nil {
		t.Errorf("ListVhostDefinitions(/): users %v vhosts %v permissions %v queues %v", defs.Users, defs.Vhosts, defs.Permissions, defs.Queues)
	}
	page, err := rh.PagedListQueuesWithParameters(url.Values{"page": {"1"}, "page_size": {"1"}, "name": {q.Name}})
	must(t, err)
	if page.FilteredCount != 1 || page.PageCount != 1 || len(page.Items) != 1 || page.Items[0].Name != q.Name {
		t.Errorf("PagedListQueuesWithParameters: %+v", page)
	}
}

func hasConn(cs []rabbithole.ConnectionInfo, name string) bool {
	for _, c := range cs {
		if c.Name == name {
			return true
		}
	}
	return false
}
