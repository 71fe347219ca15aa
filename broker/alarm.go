package broker

import (
	"time"

	"go.uber.org/zap"

	"github.com/railmq/railmq/amqp"
)

// blockWhileAlarm stops reading from a publishing connection while queues
// hold more than the memory watermark: TCP backpressure reaches the
// publisher, as RabbitMQ's memory alarm does. Clients that advertise
// connection.blocked are told.
func (c *conn) blockWhileAlarm() error {
	notify := c.clientCapability("connection.blocked")
	if notify {
		c.SendMethod(0, &amqp.ConnectionBlocked{Reason: "low on memory"})
	}
	c.log.Warn("memory alarm: blocking publishing connection", zap.Int64("memory", c.srv.MemoryUsed()))
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for c.srv.memoryAlarm() {
		select {
		case <-t.C:
		case <-c.srv.stop:
			return nil
		}
		c.runRequests()
		if c.closing.Load() {
			return nil
		}
	}
	if notify {
		c.SendMethod(0, &amqp.ConnectionUnblocked{})
	}
	c.log.Info("memory alarm cleared: unblocking connection")
	return nil
}
