package vhost

import (
	"errors"
	"fmt"
	"strings"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/auth"
	"github.com/railmq/railmq/exchange"
	"github.com/railmq/railmq/persist"
)

// ExchangeDecl is an exchange.declare.
type ExchangeDecl struct {
	Name, Type                             string
	Passive, Durable, AutoDelete, Internal bool
	Args                                   amqp.Table
	// Grant, if set, is checked where RabbitMQ checks: configure on the
	// exchange; for a new one with an alternate exchange, read on it and
	// write on the alternate.
	Grant *auth.Grant
}

// Replicator makes definitions cluster-wide (the broker's metadata
// store): the vhost proposes a change with Replicate, which returns once
// the change is committed and applied on this node, with the result of
// applying it (the same on every node: they apply the same log to the
// same state). So far exchanges, but auto-delete ones, are replicated.
type Replicator interface {
	Replicate(kind byte, name, val []byte, del bool) error
}

// ReplicateTo makes the vhost's exchanges cluster-wide through r.
func (v *VHost) ReplicateTo(r Replicator) {
	v.mu.Lock()
	v.repl = r
	v.mu.Unlock()
}

func (v *VHost) replicator() Replicator {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.repl
}

// DeclareExchange declares (or checks, when passive) an exchange.
func (v *VHost) DeclareExchange(d ExchangeDecl) error {
	if d.Name == "" {
		return amqp.Errorf(amqp.AccessRefused, "operation not permitted on the default exchange")
	}
	if err := checkNameLen("exchange", d.Name); err != nil {
		return err
	}
	if d.Passive {
		v.mu.RLock()
		missing := v.exchanges[d.Name] == nil
		v.mu.RUnlock()
		if missing {
			v.synced()
		}
	}
	if r := v.replicator(); r != nil && !d.Passive && !d.AutoDelete {
		v.mu.RLock()
		ex := v.exchanges[d.Name]
		_, err := v.checkExchangeDecl(d, ex)
		v.mu.RUnlock()
		if err != nil || ex != nil {
			return err // refused, or an equivalent redeclare
		}
		return r.Replicate(persist.DefExchange, DefName(v.name, d.Name), encodeDef(amqp.Table{
			"type": d.Type, "durable": d.Durable, "auto_delete": d.AutoDelete, "internal": d.Internal, "arguments": orEmpty(d.Args),
		}), false)
	}
	return v.declareExchange(d, false)
}

// ApplyExchange applies a committed exchange definition on this node
// (the broker calls it for each one, in log order, on every node): an
// exchange declared, with the checks of a declare (so a concurrent
// inequivalent declare fails the same way everywhere), or deleted.
func (v *VHost) ApplyExchange(name string, val []byte, del bool) error {
	if del {
		return v.deleteExchange(name, false, true /* replicated */)
	}
	t, err := amqp.DecodeTable(val)
	if err != nil {
		return fmt.Errorf("exchange %q: %w", name, err)
	}
	args, _ := t["arguments"].(amqp.Table)
	if len(args) == 0 {
		args = nil
	}
	return v.declareExchange(ExchangeDecl{Name: name, Type: str(t["type"]), Durable: t["durable"] == true,
		AutoDelete: t["auto_delete"] == true, Internal: t["internal"] == true, Args: args}, true /* replicated */)
}

// declareExchange declares an exchange in this node's registry, answered
// once stored (a replicated one is not waited for: see bindHere).
func (v *VHost) declareExchange(d ExchangeDecl, replicated bool) error {
	v.defMu.Lock()
	v.mu.Lock()
	ex, err := v.declareExchangeLocked(d)
	v.mu.Unlock()
	if err != nil || ex == nil || !ex.Durable {
		v.defMu.Unlock()
		return err
	}
	wait := v.commitDefs(func(b *persist.Batch) { v.putExchangeDef(b, ex) })
	v.defMu.Unlock()
	if replicated {
		return nil
	}
	if err := wait(); err != nil {
		// Not stored, so not declared: it would be gone after a restart.
		v.defMu.Lock()
		dc := &persist.Batch{}
		v.mu.Lock()
		if v.exchanges[ex.Name] == ex {
			v.removeExchangeLocked(ex, dc)
		}
		v.mu.Unlock()
		_ = v.commitDefs(func(b *persist.Batch) { *b = *dc })
		v.defMu.Unlock()
		return err
	}
	return nil
}

// declareExchangeLocked returns the exchange it created, if any. v.mu held.
func (v *VHost) declareExchangeLocked(d ExchangeDecl) (*exchange.Exchange, error) {
	ex := v.exchanges[d.Name]
	if d.Passive {
		if ex == nil {
			return nil, v.noExchange(d.Name)
		}
		return nil, nil
	}
	kind, err := v.checkExchangeDecl(d, ex)
	if err != nil || ex != nil {
		return nil, err
	}
	ex = exchange.New(d.Name, kind, d.Durable, d.AutoDelete, d.Internal, d.Args)
	if d.Type == exchange.DelayedType {
		ex.Delayed = true
		v.delays.add(ex)
	}
	p := best(v.policies, d.Name, false)
	if kind == exchange.Dedup {
		v.attachDedup(ex, false)
		if p != nil {
			v.dedupPolicy(ex, p)
		}
	}
	if p != nil {
		ae, _ := p.Definition["alternate-exchange"].(string)
		ex.SetPolicyAE(ae)
	}
	v.exchanges[d.Name] = ex
	return ex, nil
}

// checkExchangeDecl checks a declare of d (not passive) against ex, the
// exchange of that name or nil, as RabbitMQ checks it, in its order: the
// type, the permissions, the reserved prefix, equivalence with ex. v.mu
// held, for reading at least.
func (v *VHost) checkExchangeDecl(d ExchangeDecl, ex *exchange.Exchange) (_ exchange.Kind, err error) {
	kind, ok := exchange.ParseKind(d.Type)
	if !ok && d.Type != exchange.DelayedType {
		return 0, amqp.Errorf(amqp.CommandInvalid, "unknown exchange type '%s'", d.Type)
	}
	if err := allow(d.Grant, auth.Configure, "exchange", d.Name); err != nil {
		return 0, err
	}
	if strings.HasPrefix(d.Name, "amq.") && ex == nil {
		return 0, amqp.Errorf(amqp.AccessRefused, "exchange name '%s' contains reserved prefix 'amq.*'", d.Name)
	}
	if ex != nil {
		return kind, v.exchangeEquivalent(ex, d)
	}
	if ae, ok := d.Args["alternate-exchange"]; ok {
		name, isStr := ae.(string)
		if !isStr {
			return 0, invalidType("alternate-exchange", "exchange", d.Name, v.name, ae)
		}
		if err := allow(d.Grant, auth.Read, "exchange", d.Name); err != nil {
			return 0, err
		}
		if err := allow(d.Grant, auth.Write, "exchange", name); err != nil {
			return 0, err
		}
	}
	// The type's own checks, last, for a new exchange only, as RabbitMQ
	// runs the type's validate in rabbit_exchange:declare; a delayed
	// exchange's are its own and then its x-delayed-type's.
	if d.Type == exchange.DelayedType {
		if kind, err = delayedKind(d.Args); err != nil {
			return 0, err
		}
	}
	if err := exchange.ValidateArgs(kind, d.Args); err != nil {
		if errors.Is(err, exchange.ErrUnhashable) {
			// The plugin fails on it; RabbitMQ closes the connection.
			return 0, &amqp.Error{Code: amqp.InternalError, Text: amqp.ReplyText(amqp.InternalError)}
		}
		return 0, amqp.Errorf(amqp.PreconditionFailed, "%s", err.Error())
	}
	if kind == exchange.FederationUpstream {
		if err := federationExchangeArgs(d.Args); err != nil {
			return 0, err
		}
	}
	if kind == exchange.Dedup {
		// The plugin's validate/1.
		if _, _, _, err := dedupArgs(d.Args); err != nil {
			return 0, err
		}
		if err := checkDedupConfirm("exchange", d.Name, v.name, d.Args); err != nil {
			return 0, err
		}
	}
	return kind, nil
}

// DeleteExchange deletes an exchange; a missing one is fine (idempotent).
func (v *VHost) DeleteExchange(name string, ifUnused bool) error {
	if name == "" {
		return amqp.Errorf(amqp.AccessRefused, "operation not permitted on the default exchange")
	}
	if strings.HasPrefix(name, "amq.") {
		return amqp.Errorf(amqp.AccessRefused, "deletion of system exchange '%s' in vhost '%s' not allowed", name, v.name)
	}
	if r := v.replicator(); r != nil {
		v.mu.RLock()
		ex := v.exchanges[name]
		v.mu.RUnlock()
		if ex != nil && !ex.AutoDelete {
			if ifUnused && ex.HasBindings() {
				return amqp.Errorf(amqp.PreconditionFailed, "exchange '%s' in vhost '%s' in use", name, v.name)
			}
			return r.Replicate(persist.DefExchange, DefName(v.name, name), nil, true)
		}
	}
	return v.deleteExchange(name, ifUnused, false)
}

func (v *VHost) deleteExchange(name string, ifUnused, replicated bool) error {
	v.defMu.Lock()
	dc := &persist.Batch{}
	v.mu.Lock()
	ex := v.exchanges[name]
	if ex == nil {
		v.mu.Unlock()
		v.defMu.Unlock()
		return nil
	}
	if ifUnused && ex.HasBindings() {
		v.mu.Unlock()
		v.defMu.Unlock()
		return amqp.Errorf(amqp.PreconditionFailed, "exchange '%s' in vhost '%s' in use", name, v.name)
	}
	v.removeExchangeLocked(ex, dc)
	v.mu.Unlock()
	wait := v.commitDefs(func(b *persist.Batch) { *b = *dc })
	v.defMu.Unlock()
	if replicated {
		return nil
	}
	return wait()
}

// removeExchangeLocked drops ex and every binding from and to it, noting
// the definitions to delete in dc. v.mu held.
func (v *VHost) removeExchangeLocked(ex *exchange.Exchange, dc *persist.Batch) {
	delete(v.exchanges, ex.Name)
	if ex.Dedup != nil {
		ex.Dedup.Close() // before the drop is submitted: no segment is written after it
		if ex.Dedup.Owner != nil {
			dc.DropDedup(persist.DedupExchange, ex.Dedup.Owner)
		}
	}
	if ex.Delayed {
		v.delays.remove(ex, dc)
	}
	if ex.Durable {
		dc.DeleteDef(persist.DefExchange, DefName(v.name, ex.Name))
		for _, b := range ex.Bindings() {
			dc.DeleteDef(persist.DefBinding, bindingName(v.name, ex.Name, b))
		}
	}
	v.removeBindingsTo(exchange.Dest{Name: ex.Name, Exchange: true}, dc)
}

// removeBindingsTo drops every binding to d. v.mu held.
func (v *VHost) removeBindingsTo(d exchange.Dest, dc *persist.Batch) {
	for _, other := range v.exchanges {
		if !other.HasBindingTo(d) {
			continue
		}
		if other.Durable {
			for _, b := range other.Bindings() {
				if b.Dest == d {
					dc.DeleteDef(persist.DefBinding, bindingName(v.name, other.Name, b))
				}
			}
		}
		if other.RemoveDest(d) > 0 {
			v.autoDeleteLocked(other, dc)
		}
	}
}

// autoDeleteLocked deletes an auto-delete exchange left without bindings.
func (v *VHost) autoDeleteLocked(ex *exchange.Exchange, dc *persist.Batch) {
	if ex.AutoDelete && !ex.HasBindings() && v.exchanges[ex.Name] == ex {
		v.removeExchangeLocked(ex, dc)
	}
}
