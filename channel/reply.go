package channel

import (
	"strings"
	"sync"

	"github.com/railmq/railmq/amqp"
	"github.com/railmq/railmq/queue"
	"github.com/railmq/railmq/vhost"
)

// ReplyRegistry maps direct reply-to tokens to the channels consuming
// from amq.rabbitmq.reply-to (RabbitMQ's "fast reply-to"): a reply
// published to amq.rabbitmq.reply-to.TOKEN through the default exchange
// goes straight to that channel's consumer, with no queue in between.
type ReplyRegistry struct {
	m sync.Map // token -> *Channel
}

func (r *ReplyRegistry) register(token string, c *Channel) { r.m.Store(token, c) }
func (r *ReplyRegistry) unregister(token string)           { r.m.Delete(token) }

// deliver hands msg to the channel named by its routing key's token. It
// reports false when there is no such consumer (the reply is unroutable).
func (r *ReplyRegistry) deliver(msg *queue.Message) bool {
	token := strings.TrimPrefix(msg.RoutingKey, replyToQueue+".")
	v, ok := r.m.Load(token)
	if !ok {
		return false
	}
	return v.(*Channel).deliverReply(msg)
}

// consumeReplies starts the channel's direct reply-to consumer. It must
// be no-ack, as in RabbitMQ.
func (c *Channel) consumeReplies(m *amqp.BasicConsume) error {
	if !m.NoAck {
		return precondition("reply consumer cannot acknowledge")
	}
	tag := m.ConsumerTag
	if tag == "" {
		tag = vhost.GenerateName("amq.ctag-")
	}
	c.mu.Lock()
	_, dup := c.consumers[tag]
	if dup || c.replyTag != "" {
		c.mu.Unlock()
		if dup || tag == c.replyTag {
			return amqp.Errorf(amqp.NotAllowed, "attempt to reuse consumer tag '%s'", tag)
		}
		return precondition("reply consumer already set")
	}
	if c.replyToken == "" {
		c.replyToken = vhost.GenerateName("")
	}
	c.replyTag = tag
	c.mu.Unlock()
	c.cfg.Replies.register(c.replyToken, c)
	if !m.NoWait {
		c.send(&amqp.BasicConsumeOk{ConsumerTag: tag})
	}
	return nil
}

// rewriteReplyTo replaces reply_to amq.rabbitmq.reply-to with this
// channel's own address; publishing it without a reply consumer on the
// channel is an error, as in RabbitMQ.
func (c *Channel) rewriteReplyTo(msg *queue.Message) error {
	c.mu.Lock()
	token, active := c.replyToken, c.replyTag != ""
	c.mu.Unlock()
	if !active {
		return precondition("fast reply consumer does not exist")
	}
	props, err := amqp.DecodeProperties(msg.Props)
	if err != nil {
		return err
	}
	props.ReplyTo = replyToQueue + "." + token
	msg.Props = props.Append(nil)
	return nil
}

// deliverReply pushes a direct reply to the reply consumer.
func (c *Channel) deliverReply(msg *queue.Message) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.replyTag == "" {
		return false
	}
	c.nextTag++
	c.deliver = amqp.BasicDeliver{ConsumerTag: c.replyTag, DeliveryTag: c.nextTag,
		Exchange: msg.Exchange, RoutingKey: msg.RoutingKey}
	c.cfg.Sink.SendContent(c.cfg.Number, &c.deliver, msg.Props, msg.Body)
	return true
}
