package channel

import (
	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/exchange"
)

// Permission checks, where RabbitMQ 3.10's rabbit_channel makes them
// (configure to declare or delete, write to publish or to be bound to,
// read to consume, get, purge or bind from). Declares are checked in
// vhost (DeclareExchange, DeclareQueue), at their place among its own
// checks; passive declares, as in 3.10, are not checked.

// allow checks op on a resource; without a grant everything is allowed.
func (c *Channel) allow(op auth.Op, kind, name string) error {
	if c.cfg.Grant == nil {
		return nil
	}
	return c.cfg.Grant.Check(op, kind, name)
}

// allowBinding checks a bind or unbind, in RabbitMQ's order
// (binding_action): write on the destination; then, unless an end is the
// default exchange (refused after, by the registry), read on the source
// exchange, and read on the routing key when a topic permission covers
// the source.
func (c *Channel) allowBinding(destKind, dest, source, key string) error {
	g := c.cfg.Grant
	if g == nil {
		return nil
	}
	if err := g.Check(auth.Write, destKind, dest); err != nil {
		return err
	}
	if source == "" || (destKind == "exchange" && dest == "") {
		return nil
	}
	if err := g.Check(auth.Read, "exchange", source); err != nil {
		return err
	}
	return c.allowTopic(auth.Read, source, key)
}

// allowTopic checks a routing key on a topic exchange that a topic
// permission names.
func (c *Channel) allowTopic(op auth.Op, ex, key string) error {
	g := c.cfg.Grant
	if !g.TopicChecked(ex) {
		return nil
	}
	if kind, ok := c.cfg.VHost.ExchangeKind(ex); !ok || kind != exchange.Topic {
		return nil
	}
	return g.CheckTopic(op, ex, key)
}

// allowPublish checks write on the exchange a publish names, and its
// routing key when a topic permission covers it. The channel remembers the
// last exchange allowed and the permission it was allowed by, so a stream
// of publishes costs a pointer load and a string comparison each (a new
// permission set by an operator is a new pointer: checked again).
func (c *Channel) allowPublish(ex, key string) error {
	g := c.cfg.Grant
	if g == nil {
		return nil
	}
	p := g.Permission()
	if p == nil || p != c.pubPerm || ex != c.pubExchange {
		if err := g.CheckWith(p, auth.Write, "exchange", ex); err != nil {
			return err
		}
		c.pubPerm, c.pubExchange = p, ex
	}
	return c.allowTopic(auth.Write, ex, key)
}
