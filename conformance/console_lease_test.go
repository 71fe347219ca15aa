package conformance

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/internal/testutil"
)

// The console's channel page lists the channel's unacked deliveries with
// their ack deadlines (pending_acks), and shows a leased one as leased.
func TestConsoleLeaseDeadlines(t *testing.T) {
	testutil.InProcess(t)
	br := newBrowser(t)
	b := testutil.Start(t, broker.Options{})
	hs := httptest.NewServer(b.ManagementHandler())
	t.Cleanup(hs.Close)
	a := &api{t: t, url: hs.URL}
	conn := dial(t, b.URL)
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	must(t, err)
	must(t, ch.Confirm(false))
	_, err = ch.QueueDeclare("lease-console-q", false, false, false, false, rmq.Table{"x-consumer-timeout": int32(600000)})
	must(t, err)
	ds, err := ch.Consume("lease-console-q", "lease-console-c", false, false, false, false, nil)
	must(t, err)
	must(t, ch.Publish("", "lease-console-q", false, false, rmq.Publishing{Body: []byte("a")}))
	must(t, ch.Publish("", "lease-console-q", false, false, rmq.Publishing{Body: []byte("b")}))
	d1, _ := recv(t, ds), recv(t, ds)
	if !leasePub(t, ch, leaseX, tagKey(d1), rmq.Table{"x-lease-ms": int32(900000)}) {
		t.Fatal("lease nacked")
	}
	var name string
	testutil.Eventually(t, 5*time.Second, func() bool {
		var chans []map[string]any
		a.call("GET", "/api/channels", "guest", "guest", nil, &chans)
		for _, c := range chans {
			if c["consumer_count"] == float64(1) {
				name = c["name"].(string)
			}
		}
		return name != ""
	}, "the consumer's channel")
	u := hs.URL + "/?poll=300"
	br.login(u, "guest", "guest")
	br.run("channel page", chromedp.Navigate(u+"#/channels/"+url.PathEscape(name)), chromedp.WaitVisible(chromedp.CSS(`#channel-pending table`)))
	text := br.waitText("#channel-pending", 10*time.Second, func(s string) bool {
		return strings.Contains(s, "Unacked deliveries (2)") && strings.Contains(s, "lease-console-q") && strings.Contains(s, "yes") && strings.Contains(s, "no")
	}, "the two unacked deliveries, one leased")
	if !strings.Contains(text, "in ") {
		t.Fatalf("no deadline to come shown: %q", text)
	}
	br.shot("channel-pending")
	br.noErrors()
}
