package service

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
)

// The worker polls while a poll Temporal accepted is open or the last one answered; a failing
// poll makes it not ready until a poll after the failure is accepted.
func TestPollWatch(t *testing.T) { synctest.Test(t, pollWatchInABubble) }

func pollWatchInABubble(t *testing.T) {
	now := time.Unix(1000, 0)
	turns := 0
	p := newPollWatch(func() { turns++ })
	p.now = func() time.Time { return now }
	ctx := context.Background()
	if err := p.polling(ctx); err == nil {
		t.Fatal("polling before any poll")
	}

	poll := func(method string, answer chan error) chan error {
		done := make(chan error, 1)
		go func() {
			done <- p.intercept(ctx, method, nil, nil, nil, func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
				return <-answer
			})
		}()
		return done
	}
	// the polls run in the test's synctest bubble: once synctest.Wait returns, each is blocked on
	// its answer, past opening (its clock is p.now, the test's)
	waitOpen := func(n int) {
		t.Helper()
		synctest.Wait()
		p.mu.Lock()
		open := len(p.open)
		p.mu.Unlock()
		if open != n {
			t.Fatalf("%d polls open, want %d", open, n)
		}
	}

	// a long poll just opened is not yet proof; one open for pollSettle is
	answer := make(chan error)
	done := poll("/temporal.api.workflowservice.v1.WorkflowService/PollWorkflowTaskQueue", answer)
	waitOpen(1)
	if err := p.polling(ctx); err == nil {
		t.Fatal("polling on a poll just sent")
	}
	now = now.Add(pollSettle)
	if err := p.polling(ctx); err != nil {
		t.Fatalf("a poll open for %v: %v", pollSettle, err)
	}
	// Temporal goes away: the poll fails, and the next one is not accepted yet
	answer <- errors.New("unavailable")
	<-done
	if err := p.polling(ctx); err == nil {
		t.Fatal("polling after a failed poll")
	}
	done = poll("/temporal.api.workflowservice.v1.WorkflowService/PollActivityTaskQueue", answer)
	waitOpen(1)
	if err := p.polling(ctx); err == nil {
		t.Fatal("polling on a retry just sent")
	}
	now = now.Add(pollSettle)
	if err := p.polling(ctx); err != nil {
		t.Fatalf("a retry accepted: %v", err)
	}
	answer <- nil
	<-done
	if err := p.polling(ctx); err != nil {
		t.Fatalf("the last poll answered: %v", err)
	}
	// other calls are not polls and are not watched
	other := make(chan error, 1)
	other <- errors.New("not found")
	<-poll("/temporal.api.workflowservice.v1.WorkflowService/DescribeNamespace", other)
	if err := p.polling(ctx); err != nil {
		t.Fatalf("a failed call that is not a poll: %v", err)
	}
	if turns != 4 {
		t.Fatalf("the worker's watchdog turned %d times, want 2 per poll", turns)
	}
}
