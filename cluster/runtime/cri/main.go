// plateau-cri: a minimal CRI client for the local cluster (crictl is not
// served by the Go module proxy here). tools/cluster uses it to stop and
// remove every pod sandbox through containerd's CRI plugin on `down`, so CNI
// tears the pod networks down properly, and for `status`.
//
//	plateau-cri --endpoint unix:///run/plateau-cluster/containerd/containerd.sock pods|ps|images|status|sandbox|rm-all
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	endpoint := flag.String("endpoint", os.Getenv("CONTAINER_RUNTIME_ENDPOINT"), "CRI endpoint (unix://PATH)")
	timeout := flag.Duration("timeout", 60*time.Second, "overall timeout")
	flag.Parse()
	if *endpoint == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: plateau-cri --endpoint unix:///PATH pods|ps|images|status|sandbox|rm-all")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	target := *endpoint
	if !strings.HasPrefix(target, "unix://") {
		target = "unix://" + target
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fail(err)
	}
	defer conn.Close()
	rt := runtime.NewRuntimeServiceClient(conn)
	img := runtime.NewImageServiceClient(conn)
	switch flag.Arg(0) {
	case "pods":
		resp, err := rt.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{})
		check(err)
		for _, p := range resp.Items {
			fmt.Printf("%s\t%s/%s\t%s\n", p.Id[:13], p.Metadata.Namespace, p.Metadata.Name, p.State)
		}
	case "ps":
		resp, err := rt.ListContainers(ctx, &runtime.ListContainersRequest{})
		check(err)
		for _, c := range resp.Containers {
			fmt.Printf("%s\t%s\t%s\t%s\n", c.Id[:13], c.Metadata.Name, c.Image.Image, c.State)
		}
	case "images":
		resp, err := img.ListImages(ctx, &runtime.ListImagesRequest{})
		check(err)
		for _, i := range resp.Images {
			fmt.Printf("%s\t%s\t%d\n", strings.Join(i.RepoTags, ","), i.Id, i.Size)
		}
	case "status":
		resp, err := rt.Status(ctx, &runtime.StatusRequest{})
		check(err)
		ok := true
		for _, c := range resp.Status.Conditions {
			fmt.Printf("%s=%v %s\n", c.Type, c.Status, c.Message)
			ok = ok && c.Status
		}
		if !ok {
			os.Exit(1)
		}
	case "sandbox":
		// A bare pod sandbox (pause + CNI network), to check the runtime alone.
		resp, err := rt.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: &runtime.PodSandboxConfig{
			Metadata: &runtime.PodSandboxMetadata{Name: "runtime-check", Namespace: "plateau-cri", Uid: fmt.Sprint(time.Now().UnixNano()), Attempt: 0},
			Linux:    &runtime.LinuxPodSandboxConfig{CgroupParent: "/plateau-cri"},
		}})
		check(err)
		st, err := rt.PodSandboxStatus(ctx, &runtime.PodSandboxStatusRequest{PodSandboxId: resp.PodSandboxId})
		check(err)
		fmt.Printf("%s\t%s\t%s\n", resp.PodSandboxId[:13], st.Status.State, st.Status.Network.GetIp())
	case "rm-all":
		// Containers first, then sandboxes: stopping a sandbox runs the CNI DEL
		// (veth, IP lease, port mappings) and removes its network namespace.
		cs, err := rt.ListContainers(ctx, &runtime.ListContainersRequest{})
		check(err)
		for _, c := range cs.Containers {
			warn(rt.StopContainer(ctx, &runtime.StopContainerRequest{ContainerId: c.Id, Timeout: 0}))
			warn(rt.RemoveContainer(ctx, &runtime.RemoveContainerRequest{ContainerId: c.Id}))
		}
		ps, err := rt.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{})
		check(err)
		for _, p := range ps.Items {
			warn(rt.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: p.Id}))
			warn(rt.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: p.Id}))
		}
		fmt.Printf("removed %d containers, %d pod sandboxes\n", len(cs.Containers), len(ps.Items))
	default:
		fmt.Fprintf(os.Stderr, "plateau-cri: unknown command %q\n", flag.Arg(0))
		os.Exit(2)
	}
}

func check(err error) {
	if err != nil {
		fail(err)
	}
}

func warn[T any](_ T, err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "plateau-cri:", err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "plateau-cri:", err)
	os.Exit(1)
}
