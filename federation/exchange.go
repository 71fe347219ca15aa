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
	// routing key; exchange "" with the queue's name for a queue link)
	// and returns when the downstream accepted it: with confirm
	// (ack-mode on-confirm), once it is as safe as a publisher confirm
	// says; an error if it was refused or could not be stored. The link
	// acks upstream only after it returns nil.
	Publish(ctx context.Context, exchange, key string, msg rmq.Publishing, confirm bool) error
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
	Type    string
	Durable bool
}

// UpstreamExchangeType is RabbitMQ's internal exchange type of the
// federation plugin; AltUpstreamExchangeType stands in for it where the
// upstream does not know it (a 503 COMMAND_INVALID "unknown exchange
// type"): the hop and loop checks are then made downstream only.
const (
	UpstreamExchangeType    = "x-federation-upstream"
	AltUpstreamExchangeType = "fanout"
)

// errRetry asks the session to reconnect at once.
var errRetry = errors.New("reconnect")

// ExchangeLink federates a downstream exchange from one upstream:
// RabbitMQ's rabbit_federation_exchange_link.
type ExchangeLink struct {
	link
	x        ExchangeSpec
	pub      Publisher
	binds    Bindings
	suffix   string // the internal exchange's last suffix, A or B
	// alt: the upstream refused x-federation-upstream; use
	// AltUpstreamExchangeType from then on.
	alt      bool
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
	l.init(up, opts, Status{Type: "exchange", Name: x.Name, UpstreamName: ux})
	return l
}

// Start runs the link on a goroutine of its own; a no-op if it runs.
func (l *ExchangeLink) Start() { l.start(l.session) }

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
	ch, intX, err := l.declare(conn, st.UpstreamName, qname)
	if errors.Is(err, errRetry) {
		l.log.Info("federation link: the upstream lacks x-federation-upstream, using fanout", zap.Error(err))
		stopWatch()
		_ = conn.Close()
		if conn, uri, err = l.dial(ctx, "Federation link (upstream: "+l.up.Name+", exchange: "+l.x.Name+")"); err != nil {
			return err
		}
		stopWatch = watchClose(ctx, conn)
		defer conn.Close()
		upVhost = upstreamVhost(uri)
		qname = QueueName(st.UpstreamName, upVhost, l.opts.ClusterName, l.opts.Vhost, l.x.Name)
		ch, intX, err = l.declare(conn, st.UpstreamName, qname)
	}
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
	bound := map[string]Binding{}
	if err := l.sync(ch, st.UpstreamName, intX, bound); err != nil {
		return err
	}
	l.setState(Running, "")
	l.log.Info("federation link running", zap.String("upstream_queue", qname))
	closed := conn.NotifyClose(make(chan *rmq.Error, 1))
	upCluster := conn.ClusterName()
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
			if err := l.sync(ch, st.UpstreamName, intX, bound); err != nil {
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
func (l *ExchangeLink) declare(conn Conn, upX, qname string) (Channel, string, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, "", err
	}
	if err := ch.ExchangeDeclarePassive(upX, l.x.Type, true, false, false, false, nil); err != nil {
		if !isCode(err, rmq.NotFound) {
			return nil, "", fmt.Errorf("exchange %s upstream: %w", upX, err)
		}
		if ch, err = conn.Channel(); err != nil {
			return nil, "", err
		}
		if err := ch.ExchangeDeclare(upX, l.x.Type, l.x.Durable, false, false, false, nil); err != nil {
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
	xargs := rmq.Table{"x-downstream-name": l.opts.ClusterName, "x-downstream-vhost": l.opts.Vhost,
		"x-internal-purpose": "federation", "x-max-hops": int64(l.up.MaxHops)}
	kind := UpstreamExchangeType
	if l.alt {
		kind = AltUpstreamExchangeType
	}
	err = ch.ExchangeDeclare(intX, kind, true, true, true, false, xargs)
	if !l.alt && (isCode(err, rmq.CommandInvalid) || isCode(err, rmq.NotImplemented)) {
		// An unknown exchange type closes the connection (503 is a
		// connection exception): the session starts again with the
		// stand-in type.
		l.alt = true
		l.suffix = old[len(old)-1:]
		return nil, "", fmt.Errorf("%w: %w", errRetry, err)
	}
	if err != nil {
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

// sync makes the upstream bindings (upstream exchange to the internal
// one) match the downstream exchange's: one per distinct key and
// arguments, with x-bound-from.
func (l *ExchangeLink) sync(ch Channel, upX, intX string, bound map[string]Binding) error {
	want := map[string]Binding{}
	for _, b := range l.binds.Bindings() {
		want[bindingKey(b)] = b
	}
	for k, b := range want {
		if _, ok := bound[k]; ok {
			continue
		}
		if err := ch.ExchangeBind(intX, b.Key, upX, false, l.bindArgs(b, intX)); err != nil {
			return fmt.Errorf("bind %s upstream: %w", upX, err)
		}
		bound[k] = b
	}
	for k, b := range bound {
		if _, ok := want[k]; ok {
			continue
		}
		if err := ch.ExchangeUnbind(intX, b.Key, upX, false, l.bindArgs(b, intX)); err != nil {
			return fmt.Errorf("unbind %s upstream: %w", upX, err)
		}
		delete(bound, k)
	}
	return nil
}

// bindArgs is a binding's arguments plus x-bound-from as RabbitMQ writes
// it: [{cluster-name, exchange "VHOST:X SUFFIX", hops, vhost}].
func (l *ExchangeLink) bindArgs(b Binding, intX string) rmq.Table {
	args := copyHeaders(b.Args)
	suffix := intX[len(intX)-1:]
	args["x-bound-from"] = []any{rmq.Table{"cluster-name": l.opts.ClusterName,
		"exchange": l.opts.Vhost + ":" + l.x.Name + " " + suffix, "hops": int64(l.up.MaxHops), "vhost": l.opts.Vhost}}
	return args
}

// ShouldForward is rabbit_federation_util:should_forward/4: a message is
// forwarded unless its x-received-from has max-hops entries or more, or
// one naming this cluster and vhost.
func ShouldForward(h rmq.Table, maxHops int, cluster, vhost string) bool {
	arr, ok := h["x-received-from"].([]any)
	if !ok {
		return true
	}
	if len(arr) >= maxHops {
		return false
	}
	for _, e := range arr {
		if t, ok := e.(rmq.Table); ok && t["cluster-name"] == cluster && t["vhost"] == vhost {
			return false
		}
	}
	return true
}

// forward republishes one upstream delivery into the downstream exchange
// with x-received-from prepended, or drops it (acked) if it should not go
// on; then acks it per ack-mode.
func (l *ExchangeLink) forward(ctx context.Context, ch Channel, d rmq.Delivery, upX, upVhost, upCluster, uri string) error {
	if !ShouldForward(d.Headers, l.up.MaxHops, l.opts.ClusterName, l.opts.Vhost) {
		l.drp.Add(1)
		return settle(ch, l.up.AckMode, d.DeliveryTag, nil)
	}
	h := prependTable(copyHeaders(d.Headers), "x-received-from", rmq.Table{"uri": uri, "exchange": upX,
		"redelivered": d.Redelivered, "cluster-name": upCluster, "vhost": upVhost})
	if l.up.AckMode == OnPublish {
		if err := ch.Ack(d.DeliveryTag, false); err != nil {
			return err
		}
	}
	err := l.pub.Publish(ctx, l.x.Name, d.RoutingKey, publishing(d, h, l.up.TrustUserID), l.up.AckMode == OnConfirm)
	if err == nil {
		l.fwd.Add(1)
	}
	if l.up.AckMode != OnConfirm {
		return err
	}
	if err != nil {
		l.log.Warn("federation link: downstream refused a message", zap.Error(err))
	}
	return settle(ch, l.up.AckMode, d.DeliveryTag, err)
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
