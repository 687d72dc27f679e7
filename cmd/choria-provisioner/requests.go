package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"sync"

	"google.golang.org/grpc"
)

// requestCounter counts the Temporal requests of an operator command, by gRPC method (`hosts
// --count-requests`): how docs/operations.md measures what a listing or a retry costs.
type requestCounter struct {
	mu    sync.Mutex
	calls map[string]int
}

func (r *requestCounter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	r.mu.Lock()
	if r.calls == nil {
		r.calls = map[string]int{}
	}
	r.calls[path.Base(method)]++
	r.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

// visibilityMethods are the requests the visibility store answers.
var visibilityMethods = map[string]bool{"ListWorkflowExecutions": true, "CountWorkflowExecutions": true, "ScanWorkflowExecutions": true}

func (r *requestCounter) print(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.calls))
	visibility := 0
	for n, c := range r.calls {
		names = append(names, n)
		if visibilityMethods[n] {
			visibility += c
		}
	}
	sort.Strings(names)
	fmt.Fprintf(w, "temporal requests: %d visibility", visibility)
	for _, n := range names {
		fmt.Fprintf(w, ", %s %d", n, r.calls[n])
	}
	fmt.Fprintln(w)
}

// terminal says whether f is a terminal (a character device), not a pipe or a file.
func terminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
