package exchange

import "errors"

// ErrInvalidArgs marks binding arguments RabbitMQ refuses (an x-match that is
// not one of its four values). The channel answers it with 406
// PRECONDITION_FAILED.
var ErrInvalidArgs = errors.New("invalid binding arguments")
