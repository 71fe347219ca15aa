package cluster

// Consumer priorities and single active consumer, as RabbitMQ 4.3's
// rabbit_fifo (deps/rabbit/src/rabbit_fifo.erl at v4.3.5):
//
// Competing consumers (no x-single-active-consumer) are served from its
// service queue, a priority queue of the consumers with credit: the
// highest x-priority first, round robin among equals (a consumer served
// goes to the back of its priority), a lower one only while every higher
// one is out of credit (maybe_queue_consumer, checkout_one).
//
// With x-single-active-consumer, one consumer is active and the others
// wait, sorted by priority, then by arrival (add_waiting, sort_waiting).
// When the active one goes (cancelled or down), the first waiting one
// becomes active. When one of a higher priority than the active one
// attaches, the active one takes no more messages (quiescing) and, once
// it has none checked out (all settled or returned), the higher one takes
// over and the former waits (activate_next_consumer, update_or_remove_con
// with status quiescing).

// CheckoutPriority is Checkout for a consumer with an x-priority.
func CheckoutPriority(tag string, prefetch int, priority int32) Command {
	return Command{Kind: cmdCheckout, Consumer: tag, Prefetch: prefetch, Priority: priority}
}

// hasRoom reports whether c may take another message.
func (c *fifoCons) hasRoom() bool { return c.Prefetch == 0 || c.Out < c.Prefetch }

// nextConsumer is the consumer the next ready message goes to, nil if
// none may take one: the single active one, unless it is quiescing, or,
// among competing consumers with room, the first of the highest priority
// from f.next on (round robin).
func (f *Fifo) nextConsumer() *fifoCons {
	if f.cfg.SingleActive {
		k := f.cons[f.active]
		if k == nil || !k.hasRoom() || f.quiescing(k) {
			return nil
		}
		return k
	}
	var best *fifoCons
	at := 0
	top := f.topPriority()
	for n := 0; n < len(f.order); n++ {
		i := (f.next + n) % len(f.order)
		c := f.cons[f.order[i]]
		if c.hasRoom() && (best == nil || c.Priority > best.Priority) {
			best, at = c, i
			if c.Priority == top {
				break // none ranks higher: the first at the top, as a full scan picks
			}
		}
	}
	if best != nil {
		f.next = (at + 1) % len(f.order)
	}
	return best
}

// topPriority is the highest priority of any consumer (cached: a scan
// per message was the cost of consumer priorities with many consumers).
func (f *Fifo) topPriority() int32 {
	if !f.topValid {
		f.topPrio, f.topValid = 0, true
		first := true
		for _, c := range f.cons {
			if first || c.Priority > f.topPrio {
				f.topPrio, first = c.Priority, false
			}
		}
	}
	return f.topPrio
}

// waiting is the single active consumer's successor: the consumer of the
// highest priority, the earliest among equals, other than the active one.
func (f *Fifo) waiting() *fifoCons {
	var best *fifoCons
	for _, t := range f.order {
		if c := f.cons[t]; t != f.active && (best == nil || c.Priority > best.Priority) {
			best = c
		}
	}
	return best
}

// quiescing reports whether the active consumer k takes no more messages:
// one of a higher priority waits for it to have none checked out.
func (f *Fifo) quiescing(k *fifoCons) bool {
	w := f.waiting()
	return w != nil && w.Priority > k.Priority
}

// activate makes the right consumer the single active one: the first
// waiting one when none is active (the active one went), the
// higher-priority one waiting once the active one has nothing checked
// out.
func (f *Fifo) activate() {
	if !f.cfg.SingleActive {
		return
	}
	k := f.cons[f.active]
	if k == nil {
		f.active = ""
		if w := f.waiting(); w != nil {
			f.active = w.Tag
		}
		return
	}
	if w := f.waiting(); w != nil && w.Priority > k.Priority && k.Out == 0 {
		f.active = w.Tag
	}
}

// Active is the single active consumer's tag ("" when there is none, or
// the queue has competing consumers).
func (f *Fifo) Active() string { return f.active }
