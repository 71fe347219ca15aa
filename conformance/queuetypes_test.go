package conformance

import (
	"crypto/rand"
	"encoding/hex"
	"maps"
	"testing"

	rmq "github.com/rabbitmq/amqp091-go"
)

// The queue-behaviour tests run for both queue types wherever RabbitMQ
// supports the behaviour on both (docs/quorum-queues.md has the table of
// which do and which do not). A test that runs for both takes a
// queueKind and declares its queues with e.typedQueue; forEachType runs
// it as subtests "classic" and "quorum".

// queueKind is how a test declares a queue of one type.
type queueKind struct {
	name string
	// durable: quorum queues must be (RabbitMQ refuses a transient one:
	// 406 "invalid property 'non-durable' for queue"); the classic
	// variants keep the transient queues the tests always used.
	durable bool
	args    rmq.Table // merged into the test's own arguments
}

func (qt queueKind) quorum() bool { return qt.name == "quorum" }

var (
	classicType = queueKind{name: "classic"}
	quorumType  = queueKind{name: "quorum", durable: true, args: rmq.Table{"x-queue-type": "quorum"}}
	bothTypes   = []queueKind{classicType, quorumType}
)

// forEachType runs test once per queue type, as a subtest named after it.
func forEachType(t *testing.T, test func(t *testing.T, qt queueKind)) {
	t.Helper()
	for _, qt := range bothTypes {
		t.Run(qt.name, func(t *testing.T) { test(t, qt) })
	}
}

// declareArgs is args with the type's own arguments added.
func (qt queueKind) declareArgs(args rmq.Table) rmq.Table {
	if len(qt.args) == 0 {
		return args
	}
	out := rmq.Table{}
	maps.Copy(out, args)
	maps.Copy(out, qt.args)
	return out
}

// typedQueue declares queue name of type qt with args (a classic queue
// transient, a quorum queue durable), deleted when the test ends. An
// empty name asks the server for one for a classic queue; a quorum queue
// gets a random name of the test's choosing instead, since RabbitMQ
// declares quorum queues under the client's names (a server-named queue
// is exclusive in practice, and quorum queues cannot be).
func (e *env) typedQueue(qt queueKind, name string, args rmq.Table) string {
	e.t.Helper()
	if name == "" && qt.quorum() {
		var b [8]byte
		_, _ = rand.Read(b[:])
		name = "qq-" + hex.EncodeToString(b[:])
	}
	q, err := e.ch.QueueDeclare(name, qt.durable, false, false, false, qt.declareArgs(args))
	if err != nil {
		e.t.Fatalf("queue.declare %q (%s): %v", name, qt.name, err)
	}
	if name != "" {
		e.t.Cleanup(func() {
			if c, err := rmq.Dial(e.b.URL); err == nil {
				if ch, err := c.Channel(); err == nil {
					_, _ = ch.QueueDelete(name, false, false, false)
				}
				c.Close()
			}
		})
	}
	return q.Name
}
