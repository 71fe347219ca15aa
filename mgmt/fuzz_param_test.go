package mgmt

import "testing"

// The runtime parameters of the shovel and federation plugins: any value
// is stored or refused with RabbitMQ's error shape, never a 5xx (a shovel
// or link made of an accepted value runs, or shows why it cannot). A
// host-less URI keeps what an accepted value starts on this broker.

func FuzzPutShovelParameter(f *testing.F) {
	fuzzRoute(f, "PUT", "/api/parameters/shovel/%2F/fz-sh",
		`{"value":{"src-uri":"amqp://","src-queue":"fz-q","dest-uri":["amqp:///%2F"],"dest-queue":"fz-q3","ack-mode":"on-confirm","src-delete-after":"queue-length"}}`,
		`{"value":{"src-uri":"amqp://","src-exchange":"fz-x","src-exchange-key":"k","dest-uri":"amqp://","dest-exchange":"fz-x","dest-publish-properties":{"delivery_mode":2},"dest-add-forward-headers":true,"src-prefetch-count":0,"reconnect-delay":0}}`,
		`{"value":{"src-uri":"http://x","src-queue":1,"dest-uri":5,"src-delete-after":-1,"ack-mode":"x"}}`,
		`{"value":[1,{"a":2}]}`, `{"value":"x"}`, `{"value":{"src-uri":"amqps://u:p@[::1]:1/v?cacertfile=/nope&verify=verify_peer","src-queue":"q","dest-uri":"amqp://","dest-queue":"q"}}`)
}

func FuzzPutFederationUpstream(f *testing.F) {
	fuzzRoute(f, "PUT", "/api/parameters/federation-upstream/%2F/fz-up",
		`{"value":{"uri":"amqp://","max-hops":2,"expires":0,"message-ttl":1,"prefetch-count":10,"reconnect-delay":1.5,"ack-mode":"on-publish","trust-user-id":true}}`,
		`{"value":{"uri":["amqp://","amqp://h"],"exchange":"e","queue":"q","resource-cleanup-mode":"never"}}`,
		`{"value":{"uri":5,"max-hops":"x","bogus":1}}`, `{"value":[]}`, `{"value":{"uri":"amqp://%zz"}}`)
}

func FuzzPutFederationUpstreamSet(f *testing.F) {
	fuzzRoute(f, "PUT", "/api/parameters/federation-upstream-set/%2F/fz-set",
		`{"value":[{"upstream":"fz-up","max-hops":3},{"upstream":"nosuch"}]}`,
		`{"value":[{},{"upstream":5},"x",null]}`, `{"value":{}}`)
}
