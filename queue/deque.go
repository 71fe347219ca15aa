package queue

// deque is a ring buffer of deliveries, growing by doubling.
type deque struct {
	buf  []Delivery
	head int
	n    int
}

func (d *deque) len() int { return d.n }

func (d *deque) pushBack(x Delivery) {
	if d.n == len(d.buf) {
		d.grow()
	}
	d.buf[(d.head+d.n)&(len(d.buf)-1)] = x
	d.n++
}

func (d *deque) pushFront(x Delivery) {
	if d.n == len(d.buf) {
		d.grow()
	}
	d.head = (d.head - 1) & (len(d.buf) - 1)
	d.buf[d.head] = x
	d.n++
}

func (d *deque) front() *Delivery { return &d.buf[d.head] }

func (d *deque) popFront() Delivery {
	x := d.buf[d.head]
	d.buf[d.head] = Delivery{}
	d.head = (d.head + 1) & (len(d.buf) - 1)
	d.n--
	if d.n == 0 {
		d.head = 0
		if len(d.buf) > 1024 {
			d.buf = nil // give a drained backlog's memory back
		}
	}
	return x
}

func (d *deque) grow() {
	size := max(16, 2*len(d.buf))
	nb := make([]Delivery, size)
	for i := 0; i < d.n; i++ {
		nb[i] = d.buf[(d.head+i)&(len(d.buf)-1)]
	}
	d.buf, d.head = nb, 0
}

// seqHeap is a min-heap of deliveries by Seq: requeued messages waiting to
// go out again ahead of later ones (their original place).
type seqHeap []Delivery

func bySeq(a, b *Delivery) bool { return a.Seq < b.Seq }

func (h *seqHeap) push(x Delivery) { *h = heapPush(*h, x, bySeq) }

func (h *seqHeap) pop() Delivery {
	x, s := heapPop(*h, bySeq)
	*h = s
	return x
}

// heapPush adds x to s, a binary min-heap under less, and returns it.
func heapPush[T any](s []T, x T, less func(a, b *T) bool) []T {
	s = append(s, x)
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !less(&s[i], &s[p]) {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
	return s
}

// heapPop removes the least element of s, a binary min-heap under less
// (not empty), and returns it with the heap.
func heapPop[T any](s []T, less func(a, b *T) bool) (T, []T) {
	x := s[0]
	last := len(s) - 1
	s[0] = s[last]
	var zero T
	s[last] = zero // drop its references
	s = s[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && less(&s[l], &s[m]) {
			m = l
		}
		if r < len(s) && less(&s[r], &s[m]) {
			m = r
		}
		if m == i {
			break
		}
		s[m], s[i] = s[i], s[m]
		i = m
	}
	return x, s
}
