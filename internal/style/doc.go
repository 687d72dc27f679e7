// Package style holds the repository's own checks on the shape of its product code (its test):
// what a reader can take in at once, kept so as the code changes; and on its tests: none asserts
// by sleeping on the wall clock (sleep_test.go, the exceptions named there with why).
package style
