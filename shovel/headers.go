package shovel

import (
	"time"

	rmq "github.com/rabbitmq/amqp091-go"
)

// The headers a shovel adds (rabbit_shovel_util.erl).
const (
	ForwardHeader   = "x-shovelled"
	TimestampHeader = "x-shovelled-timestamp"
	invalidHeaders  = "x-invalid-headers"
)

// route is where a delivery is published: dest-queue through the default
// exchange; dest-exchange with dest-exchange-key, or the message's own
// routing key; neither: the exchange and key it was published with
// (rabbit_shovel_parameters.erl parse_amqp091_dest).
func (s *Shovel) route(d rmq.Delivery) (exchange, key string) {
	c := &s.cfg
	exchange, key = d.Exchange, d.RoutingKey
	switch {
	case c.DestQueue != "":
		return "", c.DestQueue
	case c.DestExchange != "":
		exchange = c.DestExchange
	}
	if c.DestExchangeKey != nil {
		key = *c.DestExchangeKey
	}
	return exchange, key
}

// publishing is the message to publish for a delivery: its properties and
// body, dest-publish-properties over them, then x-shovelled and
// x-shovelled-timestamp.
func (s *Shovel) publishing(d rmq.Delivery, srcURI, destURI string) rmq.Publishing {
	p := rmq.Publishing{
		Headers: d.Headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: d.DeliveryMode, Priority: d.Priority, CorrelationId: d.CorrelationId,
		ReplyTo: d.ReplyTo, Expiration: d.Expiration, MessageId: d.MessageId,
		Timestamp: d.Timestamp, Type: d.Type, UserId: d.UserId, AppId: d.AppId, Body: d.Body,
	}
	if len(s.cfg.DestPublishProperties) > 0 {
		setProperties(&p, s.cfg.DestPublishProperties)
	}
	if s.cfg.DestAddForwardHeaders {
		s.addForwardHeader(&p, srcURI, destURI)
	}
	if s.cfg.DestAddTimestampHeader {
		if p.Headers == nil {
			p.Headers = rmq.Table{}
		}
		p.Headers[TimestampHeader] = time.Now().Unix()
	}
	return p
}

// addForwardHeader prepends this hop's table to the x-shovelled array, as
// rabbit_shovel_util:update_headers and rabbit_basic:prepend_table_header
// (v3.10.8): shovelled-by (the cluster name), shovel-type "dynamic",
// shovel-name, shovel-vhost, src-uri and dest-uri without credentials,
// src-queue or src-exchange and src-exchange-key, and dest-exchange,
// dest-exchange-key, dest-queue where set; every value a longstr. A
// non-array x-shovelled moves to x-invalid-headers.
func (s *Shovel) addForwardHeader(p *rmq.Publishing, srcURI, destURI string) {
	c := &s.cfg
	t := rmq.Table{
		"shovelled-by": s.opts.ClusterName,
		"shovel-type":  "dynamic",
		"shovel-name":  s.opts.Name,
		"shovel-vhost": s.opts.Vhost,
		"src-uri":      Redact(srcURI),
		"dest-uri":     Redact(destURI),
	}
	if c.SrcQueue != "" {
		t["src-queue"] = c.SrcQueue
	} else {
		t["src-exchange"] = c.SrcExchange
		t["src-exchange-key"] = c.SrcExchangeKey
	}
	if c.DestExchange != "" {
		t["dest-exchange"] = c.DestExchange
	}
	if c.DestExchangeKey != nil {
		t["dest-exchange-key"] = *c.DestExchangeKey
	}
	if c.DestQueue != "" {
		t["dest-queue"] = c.DestQueue
	}
	if p.Headers == nil {
		p.Headers = rmq.Table{}
	}
	arr := []any{t}
	switch old := p.Headers[ForwardHeader].(type) {
	case nil:
	case []any:
		arr = append(arr, old...)
	default:
		inv, _ := p.Headers[invalidHeaders].(rmq.Table)
		if inv == nil {
			inv = rmq.Table{}
		}
		inv[ForwardHeader] = []any{old}
		p.Headers[invalidHeaders] = inv
	}
	p.Headers[ForwardHeader] = arr
}

// setProperties applies dest-publish-properties (validated by Parse).
func setProperties(p *rmq.Publishing, props map[string]any) {
	for k, v := range props {
		str, _ := v.(string)
		num, _ := number(v)
		switch k {
		case "content_type":
			p.ContentType = str
		case "content_encoding":
			p.ContentEncoding = str
		case "delivery_mode":
			p.DeliveryMode = uint8(num)
		case "priority":
			p.Priority = uint8(num)
		case "correlation_id":
			p.CorrelationId = str
		case "reply_to":
			p.ReplyTo = str
		case "expiration":
			p.Expiration = str
		case "message_id":
			p.MessageId = str
		case "timestamp":
			p.Timestamp = time.Unix(int64(num), 0)
		case "type":
			p.Type = str
		case "user_id":
			p.UserId = str
		case "app_id":
			p.AppId = str
		}
	}
}
