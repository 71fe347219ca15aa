package vhost

import (
	"strings"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/exchange"
	"github.com/railmq/railmq/persist"
)

// Bind binds a queue (or, with toExchange, an exchange) to source.
func (v *VHost) Bind(owner uint64, dest string, toExchange bool, source, key string, args amqp.Table) error {
	return v.bind(owner, dest, toExchange, source, key, args, true)
}

// Unbind removes a binding; a binding that does not exist is fine.
func (v *VHost) Unbind(owner uint64, dest string, toExchange bool, source, key string, args amqp.Table) error {
	return v.bind(owner, dest, toExchange, source, key, args, false)
}

func (v *VHost) bind(owner uint64, dest string, toExchange bool, source, key string, args amqp.Table, add bool) error {
	if source == "" || (toExchange && dest == "") {
		return amqp.Errorf(amqp.AccessRefused, "operation not permitted on the default exchange")
	}
	v.mu.RLock()
	r := v.repl
	missing := v.exchanges[source] == nil || (toExchange && v.exchanges[dest] == nil) || (!toExchange && v.queues[dest] == nil)
	v.mu.RUnlock()
	if r != nil && missing {
		v.synced()
	}
	v.mu.RLock()
	cluster := r != nil && v.replicatedBinding(exchange.Dest{Name: dest, Exchange: toExchange})
	v.mu.RUnlock()
	if cluster {
		// Checked here, then proposed; every node applies it (bindHere).
		v.mu.Lock()
		_, err := v.checkBindLocked(owner, dest, toExchange, source, key, args, add)
		v.mu.Unlock()
		if err != nil {
			return err
		}
		b := exchange.Binding{Dest: exchange.Dest{Name: dest, Exchange: toExchange}, Key: key, Args: args}
		return r.Replicate(persist.DefBinding, bindingName(v.name, source, b), bindingValue(b), !add)
	}
	return v.bindHere(owner, dest, toExchange, source, key, args, add, false)
}

// checkBindLocked makes a bind's checks, in RabbitMQ's order, and
// returns the source exchange. v.mu held.
func (v *VHost) checkBindLocked(owner uint64, dest string, toExchange bool, source, key string, args amqp.Table, add bool) (*exchange.Exchange, error) {
	if toExchange {
		if v.exchanges[dest] == nil {
			return nil, v.noExchange(dest)
		}
	} else {
		q := v.queues[dest]
		if q == nil {
			return nil, v.noQueue(dest)
		}
		if c := q.Config(); c.Exclusive && c.Owner != owner {
			return nil, v.locked(dest)
		}
	}
	src := v.exchanges[source]
	if src == nil {
		return nil, v.noExchange(source)
	}
	// The firehose's exchange takes bindings: that is how it is read
	// (RabbitMQ 3.10.8 binds a queue to amq.rabbitmq.trace with "#").
	if add && (strings.HasPrefix(source, "amq.rabbitmq.") && source != TraceExchange || source == LeaseExchange || source == RetryExchange) {
		return nil, amqp.Errorf(amqp.AccessRefused, "operation not permitted on exchange '%s'", source)
	}
	if add {
		if err := exchange.ValidateBinding(src.Kind, key, args); err != nil {
			return nil, amqp.Errorf(amqp.PreconditionFailed, "%s", strings.TrimPrefix(err.Error(), "exchange: "))
		}
	}
	return src, nil
}

// bindHere binds (or unbinds) in this node's registry, answered once
// stored; a replicated one (applied from the metadata store, whose log
// holds it already, on the goroutine that applies the log) is not waited
// for.
func (v *VHost) bindHere(owner uint64, dest string, toExchange bool, source, key string, args amqp.Table, add, replicated bool) error {
	if source == "" || (toExchange && dest == "") {
		return amqp.Errorf(amqp.AccessRefused, "operation not permitted on the default exchange")
	}
	v.defMu.Lock()
	dc := &persist.Batch{}
	v.mu.Lock()
	err := v.bindLocked(owner, dest, toExchange, source, key, args, add, dc)
	v.mu.Unlock()
	if err != nil {
		v.defMu.Unlock()
		return err
	}
	wait := v.commitDefs(func(b *persist.Batch) { *b = *dc })
	v.defMu.Unlock()
	if replicated {
		return nil
	}
	if err := wait(); err != nil {
		if add {
			// Not stored, so not made: it would be gone after a restart.
			v.defMu.Lock()
			v.mu.Lock()
			if src := v.exchanges[source]; src != nil {
				src.Unbind(exchange.Binding{Dest: exchange.Dest{Name: dest, Exchange: toExchange}, Key: key, Args: args})
			}
			v.mu.Unlock()
			v.defMu.Unlock()
		}
		return err
	}
	return nil
}

func (v *VHost) bindLocked(owner uint64, dest string, toExchange bool, source, key string, args amqp.Table, add bool, dc *persist.Batch) error {
	src, err := v.checkBindLocked(owner, dest, toExchange, source, key, args, add)
	if err != nil {
		return err
	}
	b := exchange.Binding{Dest: exchange.Dest{Name: dest, Exchange: toExchange}, Key: key, Args: args}
	if add {
		if src.Bind(b) && v.durableBinding(src, b.Dest) {
			v.putBindingDef(dc, source, b)
		}
		return nil
	}
	if src.Unbind(b) {
		if src.Durable {
			dc.DeleteDef(persist.DefBinding, bindingName(v.name, source, b))
		}
		v.autoDeleteLocked(src, dc)
	}
	return nil
}
