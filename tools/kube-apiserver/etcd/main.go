// Command etcd: the etcd server at the version k8s.io/kubernetes requires (go.etcd.io/etcd/server/v3).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
