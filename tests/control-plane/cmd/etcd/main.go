// Command etcd is upstream etcd's server entry point, built from go.etcd.io/etcd/server/v3 at the
// version k8s.io/kubernetes itself depends on, so the apiserver is tested against the etcd it is
// developed with. etcd's own root module (go.etcd.io/etcd/v3) carries replace directives, which
// makes `go install go.etcd.io/etcd/v3@...` refuse it; this four-line main is the same as its main.go.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
