package vhost

import (
	"fmt"
	"strings"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/exchange"
	"github.com/railmq/railmq/queue"
)

func (v *VHost) exchangeEquivalent(ex *exchange.Exchange, d ExchangeDecl) error {
	ineq := func(arg string, got, cur any) error {
		return amqp.Errorf(amqp.PreconditionFailed, "inequivalent arg '%s' for exchange '%s' in vhost '%s': received %s but current is %s",
			arg, d.Name, v.name, showArg(got), showArg(cur))
	}
	switch {
	case ex.Type() != d.Type:
		return ineq("type", typeAtom(d.Type), typeAtom(ex.Type()))
	case ex.Durable != d.Durable:
		return ineq("durable", d.Durable, ex.Durable)
	case ex.AutoDelete != d.AutoDelete:
		return ineq("auto_delete", d.AutoDelete, ex.AutoDelete)
	case ex.Internal != d.Internal:
		return ineq("internal", d.Internal, ex.Internal)
	}
	if err := argsEquivalent(d.Args, ex.Args, exchangeEquivalenceArgs(ex), func(k string, got, cur any) error {
		return ineq(k, got, cur)
	}); err != nil {
		return err
	}
	return nil
}

// typeAtom is an exchange type as RabbitMQ shows it in an inequivalent
// type error: the atom printed with ~p, so a name with a '-' comes quoted
// ('x-consistent-hash', which the message quotes again).
func typeAtom(s string) string {
	if strings.ContainsRune(s, '-') {
		return "'" + s + "'"
	}
	return s
}

func (v *VHost) queueEquivalent(q *queue.Queue, d QueueDecl) error {
	c := q.Config()
	ineq := func(arg string, got, cur any) error {
		return amqp.Errorf(amqp.PreconditionFailed, "inequivalent arg '%s' for queue '%s' in vhost '%s': received %s but current is %s",
			arg, d.Name, v.name, showArg(got), showArg(cur))
	}
	durable := d.Durable && !d.Exclusive
	// Exclusive access first (rabbit_amqqueue:assert_equivalence:
	// check_exclusive_access, then durable, auto_delete, arguments):
	// RabbitMQ 3.10.8 answers an exclusive redeclare of a durable queue
	// with 405, not with "inequivalent arg 'durable'".
	switch {
	case c.Exclusive != d.Exclusive:
		return v.locked(d.Name)
	case c.Durable != durable:
		return ineq("durable", durable, c.Durable)
	case c.AutoDelete != d.AutoDelete:
		return ineq("auto_delete", d.AutoDelete, c.AutoDelete)
	}
	cur := "classic"
	if q.Replicated() {
		cur = "quorum"
		if IsStream(c.Args) {
			cur = "stream"
		}
	}
	if t, ok := d.Args["x-queue-type"]; ok && str(t) != cur {
		if _, had := c.Args["x-queue-type"]; !had && cur == "classic" {
			// A classic queue declared with no type has none to compare
			// (rabbit_misc:assert_field_equivalence lets only "classic"
			// match nothing): what a vhost's default queue type gives a
			// queue made before it was set.
			return ineq("x-queue-type", typedValue{t}, none{})
		}
		return ineq("x-queue-type", t, cur)
	}
	if cur == "quorum" && IsQuorum(c.Args) {
		return argsEquivalent(d.Args, c.Args, quorumEquivalenceArgs, ineq)
	}
	if cur == "stream" {
		return argsEquivalent(d.Args, c.Args, streamEquivalenceArgs, ineq)
	}
	return argsEquivalent(d.Args, c.Args, equivalenceArgs, ineq)
}

// equivalenceArgs are the queue arguments a redeclare must match
// (RabbitMQ's rabbit_amqqueue equivalence list).
var equivalenceArgs = []string{
	"x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
	"x-max-length", "x-max-length-bytes", "x-max-priority", "x-overflow", "x-queue-mode",
	"x-single-active-consumer", "x-delivery-limit", "x-consumer-timeout",
	"x-retry-delay", "x-retry-backoff", "x-retry-delay-max", "x-retry-jitter",
	"x-deduplication-confirm",
	"x-message-group-header",
}

func argsEquivalent(got, cur amqp.Table, keys []string, ineq func(k string, got, cur any) error) error {
	for _, k := range keys {
		g, gok := got[k]
		c, cok := cur[k]
		if !gok && !cok {
			continue
		}
		if gok != cok || !sameValue(g, c) {
			// RabbitMQ spells out the type when one side is missing.
			var gv, cv any = none{}, none{}
			if gok {
				gv = typedValue{g}
			}
			if cok {
				cv = typedValue{c}
			}
			if gok && cok {
				gv, cv = g, c
			}
			return ineq(k, gv, cv)
		}
	}
	return nil
}

type none struct{}

// typedValue renders as "the value 'V' of type 'T'".
type typedValue struct{ v any }

func sameValue(a, b any) bool {
	ai, aok := amqp.Int(a)
	bi, bok := amqp.Int(b)
	if aok && bok {
		return ai == bi
	}
	return fmt.Sprint(a) == fmt.Sprint(b) && fmt.Sprintf("%T", a) == fmt.Sprintf("%T", b)
}

// showArg renders a value in RabbitMQ's inequivalent-arg texts.
func showArg(v any) string {
	switch v := v.(type) {
	case none:
		return "none"
	case typedValue:
		return fmt.Sprintf("the value '%v' of type '%s'", v.v, amqp.TypeName(v.v))
	case string:
		return "'" + v + "'"
	case bool:
		return fmt.Sprintf("'%v'", v)
	default:
		return fmt.Sprintf("'%v'", v)
	}
}

// CheckExchange reports the error declaring d would meet, without
// declaring it (definitions import checks a whole file first).
func (v *VHost) CheckExchange(d ExchangeDecl) error {
	if _, ok := exchange.ParseKind(d.Type); !ok && d.Type != exchange.DelayedType {
		return amqp.Errorf(amqp.CommandInvalid, "unknown exchange type '%s'", d.Type)
	}
	v.mu.RLock()
	ex := v.exchanges[d.Name]
	v.mu.RUnlock()
	if ex != nil {
		return v.exchangeEquivalent(ex, d)
	}
	if d.Name == "" || len(d.Name) > 255 {
		return amqp.Errorf(amqp.PreconditionFailed, "invalid exchange name '%s'", d.Name)
	}
	if ae, ok := d.Args["alternate-exchange"]; ok {
		if _, isStr := ae.(string); !isStr {
			return invalidType("alternate-exchange", "exchange", d.Name, v.name, ae)
		}
	}
	if d.Type == exchange.DelayedType {
		_, err := delayedKind(d.Args)
		return err
	}
	return nil
}

// CheckQueue reports the error declaring d would meet, without declaring
// it.
func (v *VHost) CheckQueue(d QueueDecl) error {
	d = v.withDefaultType(d)
	v.mu.RLock()
	q := v.queues[d.Name]
	v.mu.RUnlock()
	if q != nil {
		return v.queueEquivalent(q, d)
	}
	if d.Name == "" || len(d.Name) > 255 {
		return amqp.Errorf(amqp.PreconditionFailed, "invalid queue name '%s'", d.Name)
	}
	if strings.HasPrefix(d.Name, "amq.") && !d.Reserved {
		return amqp.Errorf(amqp.AccessRefused, "queue name '%s' contains reserved prefix 'amq.*'", d.Name)
	}
	if IsQuorum(d.Args) {
		return v.checkQuorumDecl(d)
	}
	if IsStream(d.Args) {
		return v.checkStreamDecl(d)
	}
	_, err := validateQueueArgs(d.Name, v.name, d.Args)
	return err
}
