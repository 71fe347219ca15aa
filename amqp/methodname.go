package amqp

// MethodName is the spec's name of a method ("queue.declare") by its
// class and method ids, or "none" for ids the spec does not define (as
// RabbitMQ names the method of an exception raised outside one).
func MethodName(classID, methodID uint16) string {
	if m := newMethod(classID, methodID); m != nil {
		return m.Name()
	}
	return "none"
}
