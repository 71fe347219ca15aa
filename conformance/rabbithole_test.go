package conformance

import (
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	rabbithole "github.com/michaelklishin/rabbit-hole/v2"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// rabbit-hole, the Go client of RabbitMQ's HTTP API that Terraform's
// RabbitMQ provider is built on, manages railmq's vhosts, users,
// permissions, topic permissions and limits unchanged: each call as the
// provider makes it, and what it reads back. Also run against RabbitMQ
// (RAILMQ_TEST_URL, RAILMQ_TEST_MGMT_URL).
func TestRabbitHoleManagesAccess(t *testing.T) {
	b := testutil.Start(t, broker.Options{})
	url := os.Getenv("RAILMQ_TEST_MGMT_URL")
	if testutil.ExternalURL() == "" {
		hs := httptest.NewServer(b.ManagementHandler())
		defer hs.Close()
		url = hs.URL
	} else if url == "" {
		url = "http://127.0.0.1:15673"
	}
	rh, err := rabbithole.NewTLSClient(url, "guest", "guest", &http.Transport{DisableKeepAlives: true})
	if err != nil {
		t.Fatal(err)
	}
	// done checks a call that answers with the *http.Response, and
	// closes its body (the caller's job with rabbit-hole).
	done := func(what string) func(*http.Response, error) {
		return func(res *http.Response, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			res.Body.Close()
		}
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	done("PutVhost")(rh.PutVhost("rh-v", rabbithole.VhostSettings{Description: "made by rabbit-hole", Tags: rabbithole.VhostTags{"a", "b"}}))
	t.Cleanup(func() {
		if res, err := rh.DeleteVhost("rh-v"); err == nil {
			res.Body.Close()
		}
	})
	v, err := rh.GetVhost("rh-v")
	must("GetVhost", err)
	if v.Name != "rh-v" || v.Description != "made by rabbit-hole" || len(v.Tags) != 2 {
		t.Fatalf("GetVhost: %+v", v)
	}
	done("PutUser")(rh.PutUser("rh-u", rabbithole.UserSettings{Password: "pw", Tags: rabbithole.UserTags{"management", "monitoring"}}))
	t.Cleanup(func() {
		if res, err := rh.DeleteUser("rh-u"); err == nil {
			res.Body.Close()
		}
	})
	u, err := rh.GetUser("rh-u")
	must("GetUser", err)
	if u.Name != "rh-u" || len(u.Tags) != 2 || u.HashingAlgorithm != rabbithole.HashingAlgorithmSHA256 {
		t.Fatalf("GetUser: %+v", u)
	}
	done("UpdatePermissionsIn")(rh.UpdatePermissionsIn("rh-v", "rh-u", rabbithole.Permissions{Configure: "^rh-", Write: ".*", Read: ".*"}))
	p, err := rh.GetPermissionsIn("rh-v", "rh-u")
	must("GetPermissionsIn", err)
	if p.Configure != "^rh-" || p.Vhost != "rh-v" || p.User != "rh-u" {
		t.Fatalf("GetPermissionsIn: %+v", p)
	}
	ps, err := rh.ListPermissionsOf("rh-u")
	must("ListPermissionsOf", err)
	if len(ps) != 1 {
		t.Fatalf("ListPermissionsOf: %+v", ps)
	}
	done("UpdateTopicPermissionsIn")(rh.UpdateTopicPermissionsIn("rh-v", "rh-u", rabbithole.TopicPermissions{Exchange: "amq.topic", Write: "^rh\\.", Read: ".*"}))
	tps, err := rh.ListTopicPermissionsOf("rh-u")
	must("ListTopicPermissionsOf", err)
	if len(tps) != 1 || tps[0].Exchange != "amq.topic" || tps[0].Write != "^rh\\." {
		t.Fatalf("ListTopicPermissionsOf: %+v", tps)
	}
	done("PutVhostLimits")(rh.PutVhostLimits("rh-v", rabbithole.VhostLimitsValues{"max-connections": 10, "max-queues": 5}))
	vl, err := rh.GetVhostLimits("rh-v")
	must("GetVhostLimits", err)
	if len(vl) != 1 || vl[0].Value["max-queues"] != 5 || vl[0].Value["max-connections"] != 10 {
		t.Fatalf("GetVhostLimits: %+v", vl)
	}
	done("DeleteVhostLimits")(rh.DeleteVhostLimits("rh-v", rabbithole.VhostLimits{"max-connections"}))
	done("PutUserLimits")(rh.PutUserLimits("rh-u", rabbithole.UserLimitsValues{"max-channels": 7}))
	ul, err := rh.GetUserLimits("rh-u")
	must("GetUserLimits", err)
	if len(ul) != 1 || ul[0].Value["max-channels"] != 7 {
		t.Fatalf("GetUserLimits: %+v", ul)
	}
	who, err := rh.Whoami()
	must("Whoami", err)
	if who.Name != "guest" {
		t.Fatalf("Whoami: %+v", who)
	}
	done("ClearPermissionsIn")(rh.ClearPermissionsIn("rh-v", "rh-u"))
	// The provider learns that a resource is gone from a 404.
	if _, err := rh.GetPermissionsIn("rh-v", "rh-u"); err == nil {
		t.Fatal("cleared permission still read")
	} else if e, isErr := err.(rabbithole.ErrorResponse); !isErr || e.StatusCode != 404 {
		t.Fatalf("cleared permission: %v", err)
	}
	done("DeleteUser")(rh.DeleteUser("rh-u"))
	done("DeleteVhost")(rh.DeleteVhost("rh-v"))
	if _, err := rh.GetVhost("rh-v"); err == nil {
		t.Fatal("deleted vhost still read")
	} else if e, isErr := err.(rabbithole.ErrorResponse); !isErr || e.StatusCode != 404 {
		t.Fatalf("deleted vhost: %v", err)
	}
}
