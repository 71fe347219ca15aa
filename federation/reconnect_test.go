package federation_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/railmq/railmq/broker"
	"github.com/railmq/railmq/federation"
	"github.com/railmq/railmq/internal/poll"
)

// serveAt runs a broker on addr with its store in dir; stop shuts it down.
func serveAt(t *testing.T, addr, dir string) (url string, stop func()) {
	t.Helper()
	srv, err := broker.New(broker.Options{DataDir: dir})
	must(t, err)
	var ln net.Listener
	poll.Eventually(t, 30*time.Second, func() bool {
		ln, err = net.Listen("tcp", addr)
		return err == nil
	}, "listen on %s: %v", addr, err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		if err := <-done; !errors.Is(err, broker.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(stop)
	return "amqp://guest:guest@" + ln.Addr().String() + "/", stop
}

// TestExchangeLinkReconnects: when the upstream broker goes, the link
// shows error and tries again every reconnect-delay; when it is back
// (same address, same store), the link runs again on the next suffix
// (RabbitMQ's A/B alternation) and messages flow.
func TestExchangeLinkReconnects(t *testing.T) {
	down := startNode(t)
	dch := dial(t, down.url("/"))
	must(t, dch.ExchangeDeclare("fx", "fanout", true, false, false, false, nil))
	_, err := dch.QueueDeclare("sink", true, false, false, false, nil)
	must(t, err)
	must(t, dch.QueueBind("sink", "", "fx", false, nil))

	dir := t.TempDir()
	upURL, stop := serveAt(t, "127.0.0.1:0", dir)
	addr := upURL[len("amqp://guest:guest@") : len(upURL)-1]
	u := upstream(t, "up", map[string]any{"uri": upURL, "reconnect-delay": 0.2})
	l := federation.NewExchangeLink(u, federation.ExchangeSpec{Name: "fx", Type: "fanout", Durable: true},
		newPublisher(t, down.url("/")), newBindings(""), federation.Options{ClusterName: "down", Vhost: "/"})
	l.Start()
	t.Cleanup(l.Stop)
	waitRunning(t, l)

	stop()
	poll.Eventually(t, 30*time.Second, func() bool { return l.Status().LastError == "econnrefused" },
		"no econnrefused after the upstream went: %+v", l.Status())
	upURL, _ = serveAt(t, addr, dir)
	waitRunning(t, l)
	uch := dial(t, upURL)
	// The internal exchange of the second session is "A"; "B" is gone.
	must(t, uch.ExchangeDeclarePassive("federation: fx -> down A", "fanout", true, true, true, false, nil))
	var ae *rmq.Error
	if err := dial(t, upURL).ExchangeDeclarePassive("federation: fx -> down B", "fanout", true, true, true, false, nil); !errors.As(err, &ae) || ae.Code != rmq.NotFound {
		t.Fatalf("the first session's exchange: %v", err)
	}
	// Restart: a new session, on the next suffix again.
	l.Restart()
	waitRunning(t, l)
	must(t, uch.ExchangeDeclarePassive("federation: fx -> down B", "fanout", true, true, true, false, nil))
	poll.Eventually(t, 30*time.Second, func() bool {
		must(t, uch.Publish("fx", "", false, false, rmq.Publishing{Body: []byte("after")}))
		_, ok, err := dch.Get("sink", true)
		must(t, err)
		return ok
	}, "nothing flows after the upstream came back")
}
