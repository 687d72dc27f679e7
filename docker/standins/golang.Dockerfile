# Stand-in for golang:1.26-bookworm, built where no image registry is reachable: the Debian base
# (debootstrap, with CA certificates) plus the Go toolchain the module proxy serves as golang.org/toolchain, the same
# release as this machine's go. Unlike the official image it has no gcc or git (the project's
# Dockerfile builds with CGO_ENABLED=0 from the module proxy).
FROM choria-temporal/standin-base:bookworm
COPY go /usr/local/go
ENV GOTOOLCHAIN=local GOPATH=/go PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
RUN mkdir -p /go/bin /go/src && go version
WORKDIR /go
