package workflows

import "go.temporal.io/sdk/client"

// starter starts the suite's runs as hostruns.Starter does (a client package, which this one
// cannot import): the workflow ID, the task queue and the start search attributes are all the
// test environment reads of a start's options, and hostruns' tests hold its Starter to them.
type starter struct{ TaskQueue, Site string }

func (s starter) Options(in ProvisionInput) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{ID: WorkflowID(in.Identity), TaskQueue: s.TaskQueue,
		TypedSearchAttributes: StartSearchAttributes(in.Identity, s.Site, in.Source)}
}
