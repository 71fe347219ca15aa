package federation

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"

	rmq "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
)

// Publisher republishes what a link consumed upstream into the
// downstream broker; the broker implements it.
type Publisher interface {
	// Publish routes msg through the downstream exchange (key is the
	// routing key; exchange "" with the queue's name for a queue link).
	// It must not block for the store: done runs exactly once (on any
	// goroutine, possibly before Publish returns) when the downstream
	// accepted the message, with nil once it is as safe as a publisher
	// confirm says (ack-mode on-confirm, confirm true; without confirm,
	// once routed), or with why it was refused or not stored. The link
	// acks upstream in done (on-confirm), so as many messages as
	// prefetch-count are in flight. An error returned by Publish itself
	// (done not called) ends the link's session.
	Publish(ctx context.Context, exchange, key string, msg rmq.Publishing, confirm bool, done func(error)) error
}

// Binding is one binding of the downstream exchange, as its link repeats
// it upstream.
type Binding struct {
	Key  string
	Args rmq.Table // the binding's arguments (headers exchanges); may be nil
}

// Bindings lists the downstream exchange's bindings as they change; the
// broker implements it.
type Bindings interface {
	// Bindings is the exchange's current bindings (to queues or
	// exchanges), duplicates allowed.
	Bindings() []Binding
	// Changed signals (one slot, never closed) after the bindings changed.
	Changed() <-chan struct{}
}

// ExchangeSpec is the downstream exchange a link federates.
type ExchangeSpec struct {
	Name string
	// Type is the exchange's type, used to declare the upstream exchange
	// when it is missing.
	Type                          string
	Durable, AutoDelete, Internal bool
	Args                          rmq.Table
}

// UpstreamExchangeType is RabbitMQ's internal exchange type of the
// federation plugin; AltUpstreamExchangeType stands in for it where the
// upstream does not know it (503 COMMAND_INVALID), as RabbitMQ's link
// does.
const (
	UpstreamExchangeType    = "x-federation-upstream"
	AltUpstreamExchangeType = "fanout"
)

// ExchangeLink federates a downstream exchange from one upstream:
// RabbitMQ's rabbit_federation_exchange_link.
type ExchangeLink struct {
	link
	x        ExchangeSpec
	pub      Publisher
	binds    Bindings
	suffix   string // the internal exchange's last suffix, A or B
	fwd, drp atomic.Uint64
}

// NewExchangeLink makes the link of exchange x from upstream up; it does
// nothing until Start.
func NewExchangeLink(up Upstream, x ExchangeSpec, pub Publisher, binds Bindings, opts Options) *ExchangeLink {
	l := &ExchangeLink{x: x, pub: pub, binds: binds, suffix: "A"}
	ux := up.Exchange
	if ux == "" {
		ux = x.Name
	}
	l.sess = l.session
	l.init(up, opts, Status{Type: "exchange", Name: x.Name, UpstreamName: ux})
	return l
}

// Status is a snapshot of the link.
func (l *ExchangeLink) Status() Status {
	st := l.link.Status()
	st.Forwarded, st.Dropped = l.fwd.Load(), l.drp.Load()
	return st
}

// QueueName is the upstream queue's name (upstream_queue_name/3):
// "federation: X -> CLUSTER" then "" if the downstream vhost and exchange
// are the upstream's, ":DX" if only the vhost is, else ":VHOST:DX".
func QueueName(upX, upVhost, cluster, downVhost, downX string) string {
	down := ""
	switch {
	case upVhost == downVhost && upX == downX:
	case upVhost == downVhost:
		down = ":" + downX
	default:
		down = ":" + downVhost + ":" + downX
	}
	return "federation: " + upX + " -> " + cluster + down
}

// bindingKey identifies a binding (key and arguments).
func bindingKey(b Binding) string {
	keys := make([]string, 0, len(b.Args))
	for k := range b.Args {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var s strings.Builder
	s.WriteString(b.Key)
	for _, k := range keys {
		fmt.Fprintf(&s, "\x00%s=%v", k, b.Args[k])
	}
	return s.String()
}

// session is one upstream connection: declare, bind, consume, forward.
func (l *ExchangeLink) session(ctx context.Context) error {
	conn, uri, err := l.dial(ctx, "Federation link (upstream: "+l.up.Name+", exchange: "+l.x.Name+")")
	if err != nil {
		return err
	}
	stopWatch := watchClose(ctx, conn)
	defer func() { stopWatch() }()
	defer conn.Close()
	st := l.link.Status()
	upVhost := upstreamVhost(uri)
	qname := QueueName(st.UpstreamName, upVhost, l.opts.ClusterName, l.opts.Vhost, l.x.Name)
	ch, intX, err := l.declare(ctx, conn, uri, st.UpstreamName, qname)
	if err != nil {
		return err
	}
	if err := ch.Qos(l.up.PrefetchCount, 0, false); err != nil && l.up.AckMode != NoAck {
		return fmt.Errorf("basic.qos: %w", err)
	}
	dels, err := ch.Consume(qname, "", l.up.AckMode == NoAck, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", qname, err)
	}
	upCluster := conn.ClusterName()
	bound := map[string]rmq.Table{}
	if err := l.sync(ch, st.UpstreamName, intX, upCluster, upVhost, bound); err != nil {
		return err
	}
	l.setState(Running, "")
	l.log.Info("federation link running", zap.String("upstream_queue", qname))
	closed := conn.NotifyClose(make(chan *rmq.Error, 1))
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e := <-closed:
			if e == nil {
				return errors.New("upstream connection closed")
			}
			return e
		case <-l.binds.Changed():
			if err := l.sync(ch, st.UpstreamName, intX, upCluster, upVhost, bound); err != nil {
				return err
			}
		case d, ok := <-dels:
			if !ok {
				return errors.New("upstream consumer cancelled")
			}
			if err := l.forward(ctx, ch, d, st.UpstreamName, upVhost, upCluster, st.URI); err != nil {
				return err
			}
		}
	}
}

// declare makes the upstream exchange (if missing), the internal
// exchange with the other suffix, the queue, and binds them; then
// deletes the internal exchange of the previous session (and with it its
// bindings).
func (l *ExchangeLink) declare(ctx context.Context, conn Conn, uri, upX, qname string) (Channel, string, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, "", err
	}
	if err := ch.ExchangeDeclarePassive(upX, l.x.Type, l.x.Durable, l.x.AutoDelete, l.x.Internal, false, l.x.Args); err != nil {
		if !isCode(err, rmq.NotFound) {
			return nil, "", fmt.Errorf("exchange %s upstream: %w", upX, err)
		}
		if ch, err = conn.Channel(); err != nil {
			return nil, "", err
		}
		if err := ch.ExchangeDeclare(upX, l.x.Type, l.x.Durable, l.x.AutoDelete, l.x.Internal, false, l.x.Args); err != nil {
			return nil, "", fmt.Errorf("declare exchange %s upstream: %w", upX, err)
		}
	}
	qargs := rmq.Table{"x-internal-purpose": "federation"}
	if l.up.Expires > 0 {
		qargs["x-expires"] = l.up.Expires
	}
	if l.up.MessageTTL > 0 {
		qargs["x-message-ttl"] = l.up.MessageTTL
	}
	if l.up.HAPolicy != "" {
		qargs["x-ha-policy"] = l.up.HAPolicy
	}
	if _, err := ch.QueueDeclare(qname, true, false, false, false, qargs); err != nil {
		return nil, "", fmt.Errorf("declare queue %s upstream: %w", qname, err)
	}
	old := qname + " " + l.suffix
	if l.suffix == "A" {
		l.suffix = "B"
	} else {
		l.suffix = "A"
	}
	intX := qname + " " + l.suffix
	if err := l.declareInternal(ctx, conn, ch, uri, intX); err != nil {
		return nil, "", fmt.Errorf("declare exchange %s upstream: %w", intX, err)
	}
	if err := ch.QueueBind(qname, "", intX, false, nil); err != nil {
		return nil, "", fmt.Errorf("bind %s upstream: %w", qname, err)
	}
	if err := ch.ExchangeDelete(old, false, false); err != nil {
		// A missing exchange is not an error in RabbitMQ 3.x; one that is
		// closes the channel, so open another.
		if ch, err = conn.Channel(); err != nil {
			return nil, "", err
		}
	}
	return ch, intX, nil
}

// declareInternal is ensure_internal_exchange/2 (v3.10.8): delete the
// exchange, then declare it as x-federation-upstream on a disposable
// connection (an unknown type is a connection exception, 503), and if
// the upstream does not know the type, as a fanout on ch with
// x-internal-purpose only; the hop and loop checks are then made
// downstream only (ShouldForward), as RabbitMQ's link does too.
func (l *ExchangeLink) declareInternal(ctx context.Context, conn Conn, ch Channel, uri, intX string) error {
	if dch, err := conn.Channel(); err == nil {
		_ = dch.ExchangeDelete(intX, false, false)
		_ = dch.Close()
	}
	purpose := rmq.Table{"x-internal-purpose": "federation"}
	xargs := rmq.Table{"x-downstream-name": l.opts.ClusterName, "x-downstream-vhost": l.opts.Vhost,
		"x-internal-purpose": "federation", "x-max-hops": int64(l.up.MaxHops)}
	dconn, err := l.opts.Dialer.Dial(ctx, uri, "Federation link (upstream: "+l.up.Name+", disposable)")
	if err != nil {
		return err
	}
	defer dconn.Close()
	dch, err := dconn.Channel()
	if err != nil {
		return err
	}
	err = dch.ExchangeDeclare(intX, UpstreamExchangeType, true, true, true, false, xargs)
	if isCode(err, rmq.CommandInvalid) {
		return ch.ExchangeDeclare(intX, AltUpstreamExchangeType, true, true, true, false, purpose)
	}
	return err
}

// sync makes the upstream bindings (upstream exchange to the internal
// one) match the downstream exchange's: one per distinct key and
// arguments, with x-bound-from.
func (l *ExchangeLink) sync(ch Channel, upX, intX, upCluster, upVhost string, bound map[string]rmq.Table) error {
	want := map[string]Binding{}
	for _, b := range l.binds.Bindings() {
		want[bindingKey(b)] = b
	}
	for k, b := range want {
		if _, ok := bound[k]; ok {
			continue
		}
		args, ok := l.bindArgs(b, intX, upCluster, upVhost)
		if !ok {
			continue
		}
		if err := ch.ExchangeBind(intX, b.Key, upX, false, args); err != nil {
			return fmt.Errorf("bind %s upstream: %w", upX, err)
		}
		bound[k] = args
	}
	for k, args := range bound {
		if _, ok := want[k]; ok {
			continue
		}
		key, _, _ := strings.Cut(k, "\x00")
		if err := ch.ExchangeUnbind(intX, key, upX, false, args); err != nil {
			return fmt.Errorf("unbind %s upstream: %w", upX, err)
		}
		delete(bound, k)
	}
	return nil
}

// bindArgs is a binding's arguments with x-bound-from prepended as
// update_binding/2 (v3.10.8) writes it: {cluster-name, vhost, exchange
// "VHOST:X SUFFIX", hops (short)}; hops is max-hops, or for a binding
// that itself came from a federation link one less than its own (capped
// by max-hops). ok is false when the binding must not go upstream (hops
// 0, or it came from the upstream's own cluster and vhost).
func (l *ExchangeLink) bindArgs(b Binding, intX, upCluster, upVhost string) (rmq.Table, bool) {
	hops := l.up.MaxHops
	if all, ok := b.Args["x-bound-from"].([]any); ok && len(all) > 0 {
		prev, _ := all[0].(rmq.Table)
		hops = min(int(visitCount(prev["hops"]))-1, l.up.MaxHops)
		if seen(all, upCluster, upVhost) {
			hops = 0
		}
	}
	if hops <= 0 {
		return nil, false
	}
	args := copyHeaders(b.Args)
	suffix := intX[len(intX)-1:]
	return prependTable(args, "x-bound-from", rmq.Table{"cluster-name": l.opts.ClusterName, "vhost": l.opts.Vhost,
		"exchange": l.opts.Vhost + ":" + l.x.Name + " " + suffix, "hops": int16(hops)}), true
}

// seen is already_seen/3: an entry of arr names cluster and vhost.
func seen(arr []any, cluster, vhost string) bool {
	for _, e := range arr {
		if t, ok := e.(rmq.Table); ok && t["cluster-name"] == cluster && t["vhost"] == vhost {
			return true
		}
	}
	return false
}

// ShouldForward is rabbit_federation_util:should_forward/4: a message is
// forwarded unless its x-received-from has max-hops entries or more, or
// one naming this cluster and vhost.
func ShouldForward(h rmq.Table, maxHops int, cluster, vhost string) bool {
	arr, ok := h["x-received-from"].([]any)
	if !ok {
		return true
	}
	return len(arr) < maxHops && !seen(arr, cluster, vhost)
}

// forward republishes one upstream delivery into the downstream exchange
// with x-received-from prepended, or drops it (acked) if it should not go
// on; then acks it per ack-mode.
func (l *ExchangeLink) forward(ctx context.Context, ch Channel, d rmq.Delivery, upX, upVhost, upCluster, uri string) error {
	if !ShouldForward(d.Headers, l.up.MaxHops, l.opts.ClusterName, l.opts.Vhost) {
		l.drp.Add(1)
		return settle(ch, l.up.AckMode, d.DeliveryTag, nil)
	}
	// update_routing_headers/5: cluster-name only when the upstream says
	// its name; "exchange" is the downstream exchange's name
	// (rabbit_federation_upstream.erl params_table/2 is given the
	// downstream's record, v3.10.8).
	entry := rmq.Table{"uri": uri, "exchange": l.x.Name, "redelivered": d.Redelivered, "vhost": upVhost}
	if upCluster != "" {
		entry["cluster-name"] = upCluster
	}
	h := prependTable(copyHeaders(d.Headers), "x-received-from", entry)
	return republish(ctx, l.pub, ch, l.up, l.x.Name, d.RoutingKey, d.DeliveryTag, publishing(d, h, l.up.TrustUserID), &l.fwd, l.log)
}

// Cleanup removes what the link made upstream (the queue and both
// internal exchanges), as RabbitMQ does when a link is removed and
// resource-cleanup-mode is not "never". The link must be stopped.
func (l *ExchangeLink) Cleanup(ctx context.Context) error {
	if l.up.ResourceCleanupMode == "never" {
		return nil
	}
	conn, uri, err := l.dial(ctx, "Federation link cleanup (upstream: "+l.up.Name+")")
	if err != nil {
		return err
	}
	defer conn.Close()
	st := l.link.Status()
	upVhost := upstreamVhost(uri)
	qname := QueueName(st.UpstreamName, upVhost, l.opts.ClusterName, l.opts.Vhost, l.x.Name)
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	for _, s := range []string{"A", "B"} {
		if err := ch.ExchangeDelete(qname+" "+s, false, false); err != nil {
			return err
		}
	}
	_, err = ch.QueueDelete(qname, false, false, false)
	return err
}
