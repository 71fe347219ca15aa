package mgmt

import (
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// What a request must be before a handler reads it: against cross-site
// request forgery, a state-changing request (POST, PUT, DELETE) that a
// browser marks as coming from another site (Origin) is refused, and a
// body must be JSON, which a form or a cross-site fetch without CORS
// (never granted here) cannot send; and a body is at most
// Options.MaxBodySize.

// DefaultMaxBodySize is RabbitMQ's management.http_max_body_size
// default (MANAGEMENT_DEFAULT_HTTP_MAX_BODY_SIZE, 20000000 bytes).
const DefaultMaxBodySize = 20000000

// bodyTooLarge is RabbitMQ 3.10.8's answer to a body over the limit
// (POST /api/definitions with 20,000,146 bytes: 400
// {"error":"bad_request","reason":"Exceeded HTTP request body size limit"}).
func bodyTooLarge(w http.ResponseWriter) {
	badRequest(w, "Exceeded HTTP request body size limit")
}

// sameOrigin refuses a state-changing request whose Origin is another
// site's (403); a request without Origin (not from a browser, or
// same-origin GET) or from the console's own origin passes.
func sameOrigin(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if changesState(r.Method) {
			if o := r.Header.Get("Origin"); o != "" && !originIsHost(o, r) {
				apiError(w, http.StatusForbidden, "forbidden", "cross-origin request refused: origin "+o+" is not "+r.Host)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

func changesState(method string) bool {
	return method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions
}

// originIsHost reports whether origin (scheme://host[:port]) names the
// host the request was sent to, by the same scheme.
func originIsHost(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.Path != "" && u.Path != "/" {
		return false // "null" (a sandboxed or file page) included
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return strings.EqualFold(u.Scheme, scheme) && strings.EqualFold(u.Host, r.Host)
}

// jsonBodies answers a request with a body that is not JSON 415, and caps
// bodies at max bytes. It runs once the user has authenticated (as
// RabbitMQ checks the content type after is_authorized: a text/plain
// body without credentials is a 401), and marks the socket
// authenticated.
//
// RabbitMQ 3.10.8 answers 415 with no body to POST /api/definitions with
// text/plain, application/x-www-form-urlencoded or application/jsonx, and
// takes application/json with parameters ("application/json;
// charset=utf-8"); its other routes take any content type (PUT
// /api/queues/%2F/q with text/plain: 201), which railmq does not: a
// cross-site form could send one.
func jsonBodies(max int64, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		markAuthenticated(r)
		if r.ContentLength > max {
			bodyTooLarge(w)
			return
		}
		if r.ContentLength != 0 && r.Method != http.MethodGet && r.Method != http.MethodHead {
			mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
			if r.Header.Get("Content-Type") != "" && (err != nil || mt != "application/json") {
				if strings.HasPrefix(r.URL.Path, "/api/definitions") {
					w.WriteHeader(http.StatusUnsupportedMediaType) // RabbitMQ's: no body
					return
				}
				apiError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "request bodies must be application/json")
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, max)
		}
		h.ServeHTTP(w, r)
	})
}
