#!/usr/bin/env bash
# Prints the project's version, the one `choria-provisioner --version` shows and the packages
# carry (nfpm turns a semver pre-release "-dev.N" into "~dev.N", which sorts before the release in
# both dpkg and rpm):
#   on a tag vX.Y.Z                 X.Y.Z
#   N commits after tag vX.Y.Z      X.Y.(Z+1)-dev.N+gSHA
#   no tag yet                      1.0.0-dev.N+gSHA (N: commits in the history)
# The untagged base is 1.0.0 so that these packages upgrade over the Choria Provisioner's, whose
# last release is 0.16.0. ".dirty" is added when tracked files have uncommitted changes.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! git rev-parse --git-dir >/dev/null 2>&1; then
  echo "1.0.0-dev.0+unknown"
  exit 0
fi
sha=$(git rev-parse --short=7 HEAD)
dirty=""
git diff --quiet HEAD -- 2>/dev/null || dirty=".dirty"
if tag=$(git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null) && [ -z "$dirty" ]; then
  echo "${tag#v}"
  exit 0
fi
if tag=$(git describe --tags --abbrev=0 --match 'v[0-9]*' 2>/dev/null); then
  IFS=. read -r major minor patch <<<"${tag#v}"
  patch=${patch%%[-+]*}
  base="$major.$minor.$((patch + 1))"
  n=$(git rev-list --count "$tag..HEAD")
else
  base=1.0.0
  n=$(git rev-list --count HEAD)
fi
echo "$base-dev.$n+g$sha$dirty"
