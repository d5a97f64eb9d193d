// Package conformance holds the client conformance suite: its tests replay, against a real
// broker, the requests the official Queen clients (Go, JavaScript, Python, queenctl, the
// streams SDKs) send, byte for byte as they send them, and the exchanges captured from the
// reference server. Each case checks the answer's status, the fields that client reads, and
// then the data behind the answer: the message stored, moved or redelivered, the cursor
// advanced. A change that refuses or reshapes what a client sends fails here.
package conformance
