package main

import (
	"encoding/json"
	"reflect"
	"testing"
)

// moveValue is the value RabbitMQ 3.10.8's UI puts for "Move messages"
// (recorded on this machine, conformance/move_test.go rabbitMoveBody).
func TestMoveValue(t *testing.T) {
	const rabbit = `{"src-uri":"amqp:///%2F","src-queue":"move-probe-src","src-protocol":"amqp091","src-prefetch-count":1000,"src-delete-after":"queue-length","dest-protocol":"amqp091","dest-uri":"amqp:///%2F","dest-add-forward-headers":false,"ack-mode":"on-confirm","dest-queue":"move-probe-dst","src-consumer-args":{}}`
	for _, tc := range []struct {
		name                 string
		vhost, destURI, want string
		stream               bool
	}{
		{name: "as RabbitMQ's UI", vhost: "/", want: rabbit},
		// encodeURIComponent's escapes (formatters.js esc).
		{name: "vhost escaped", vhost: "a b/c", want: `{"src-uri":"amqp:///a%20b%2Fc","src-queue":"move-probe-src","src-protocol":"amqp091","src-prefetch-count":1000,"src-delete-after":"queue-length","dest-protocol":"amqp091","dest-uri":"amqp:///a%20b%2Fc","dest-add-forward-headers":false,"ack-mode":"on-confirm","dest-queue":"move-probe-dst","src-consumer-args":{}}`},
		// The UI's arrayable URI fields: one is a string, several a list.
		{name: "one URI", vhost: "/", destURI: " amqp://h1 ", want: `{"src-uri":"amqp:///%2F","src-queue":"move-probe-src","src-protocol":"amqp091","src-prefetch-count":1000,"src-delete-after":"queue-length","dest-protocol":"amqp091","dest-uri":"amqp://h1","dest-add-forward-headers":false,"ack-mode":"on-confirm","dest-queue":"move-probe-dst","src-consumer-args":{}}`},
		{name: "URIs", vhost: "/", destURI: "amqp://h1 amqp://h2", want: `{"src-uri":"amqp:///%2F","src-queue":"move-probe-src","src-protocol":"amqp091","src-prefetch-count":1000,"src-delete-after":"queue-length","dest-protocol":"amqp091","dest-uri":["amqp://h1","amqp://h2"],"dest-add-forward-headers":false,"ack-mode":"on-confirm","dest-queue":"move-probe-dst","src-consumer-args":{}}`},
		{name: "from a stream", vhost: "/", stream: true, want: `{"src-uri":"amqp:///%2F","src-queue":"move-probe-src","src-protocol":"amqp091","src-prefetch-count":1000,"src-delete-after":"queue-length","dest-protocol":"amqp091","dest-uri":"amqp:///%2F","dest-add-forward-headers":false,"ack-mode":"on-confirm","dest-queue":"move-probe-dst","src-consumer-args":{"x-stream-offset":"first"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(moveValue(tc.vhost, "move-probe-src", "move-probe-dst", tc.destURI, tc.stream))
			must(t, err)
			var got, want any
			must(t, json.Unmarshal(b, &got))
			must(t, json.Unmarshal([]byte(tc.want), &want))
			if !reflect.DeepEqual(got, want) {
				t.Errorf("moveValue = %s\nwant %s", b, tc.want)
			}
		})
	}
}
