// Package testkit holds what the tests of several packages share: waiting on a condition, a
// log buffer goroutines write to, signed JWTs, and certificates made for one test. Only tests
// import it.
package testkit
