#!/bin/sh
# Entry point of the temporalio/ui stand-in: ui-server renders ./config/docker.yaml itself.
set -eu
exec ./ui-server --env docker start
