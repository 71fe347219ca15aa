package vhost

import (
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

// DeclareExchange declares (or checks, when passive) an exchange.
func (v *VHost) DeclareExchange(d ExchangeDecl) error {
	if d.Name == "" {
		return amqp.Errorf(amqp.AccessRefused, "operation not permitted on the default exchange")
	}
	v.defMu.Lock()
	defer v.defMu.Unlock()
	v.mu.Lock()
	ex, err := v.declareExchangeLocked(d)
	v.mu.Unlock()
	if err != nil || ex == nil || !ex.Durable {
		return err
	}
	return v.commitDefs(func(b *persist.Batch) { v.putExchangeDef(b, ex) })
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
	kind, ok := exchange.ParseKind(d.Type)
	if !ok {
		return nil, amqp.Errorf(amqp.CommandInvalid, "unknown exchange type '%s'", d.Type)
	}
	if err := allow(d.Grant, auth.Configure, "exchange", d.Name); err != nil {
		return nil, err
	}
	if strings.HasPrefix(d.Name, "amq.") && ex == nil {
		return nil, amqp.Errorf(amqp.AccessRefused, "exchange name '%s' contains reserved prefix 'amq.*'", d.Name)
	}
	if ex != nil {
		return nil, v.exchangeEquivalent(ex, kind, d)
	}
	if ae, ok := d.Args["alternate-exchange"]; ok {
		name, isStr := ae.(string)
		if !isStr {
			return nil, invalidType("alternate-exchange", "exchange", d.Name, v.name, ae)
		}
		if err := allow(d.Grant, auth.Read, "exchange", d.Name); err != nil {
			return nil, err
		}
		if err := allow(d.Grant, auth.Write, "exchange", name); err != nil {
			return nil, err
		}
	}
	ex = exchange.New(d.Name, kind, d.Durable, d.AutoDelete, d.Internal, d.Args)
	if p := best(v.policies, d.Name, false); p != nil {
		ae, _ := p.Definition["alternate-exchange"].(string)
		ex.SetPolicyAE(ae)
	}
	v.exchanges[d.Name] = ex
	return ex, nil
}

// DeleteExchange deletes an exchange; a missing one is fine (idempotent).
func (v *VHost) DeleteExchange(name string, ifUnused bool) error {
	if name == "" {
		return amqp.Errorf(amqp.AccessRefused, "operation not permitted on the default exchange")
	}
	if strings.HasPrefix(name, "amq.") {
		return amqp.Errorf(amqp.AccessRefused, "deletion of system exchange '%s' in vhost '%s' not allowed", name, v.name)
	}
	v.defMu.Lock()
	defer v.defMu.Unlock()
	dc := &persist.Batch{}
	v.mu.Lock()
	ex := v.exchanges[name]
	if ex == nil {
		v.mu.Unlock()
		return nil
	}
	if ifUnused && ex.HasBindings() {
		v.mu.Unlock()
		return amqp.Errorf(amqp.PreconditionFailed, "exchange '%s' in vhost '%s' in use", name, v.name)
	}
	v.removeExchangeLocked(ex, dc)
	v.mu.Unlock()
	return v.commitDefs(func(b *persist.Batch) { *b = *dc })
}

// removeExchangeLocked drops ex and every binding from and to it, noting
// the definitions to delete in dc. v.mu held.
func (v *VHost) removeExchangeLocked(ex *exchange.Exchange, dc *persist.Batch) {
	delete(v.exchanges, ex.Name)
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
