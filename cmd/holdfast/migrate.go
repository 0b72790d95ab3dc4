package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/google/renameio/v2"

	"github.com/holdfast-dev/holdfast/server/store"
)

// The store's moves: holdfast server export and import, to go from the
// embedded store to a cluster with the revisions, the audit and the store
// id, so that clients resume by cursor.

func serverExportCommand() *command {
	return &command{
		name:    "server export",
		summary: "write a store's keys, with their revisions, to a file (to move it to a cluster)",
		doc: `
Server export writes every key of a store under "/holdfast" (namespaces,
the audit log, schemas, the store id), each with the revision it was last
written at, to -o FILE. Stop the servers of the store first: a publish
after the export is not in it. The embedded store of -data-dir is opened
for the export (refused while a server holds it); -etcd exports an
external cluster's.

Move the embedded store to a cluster:

	holdfast server export -data-dir ./holdfast-data -o store.jsonl
	holdfast server import -etcd 10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379 -i store.jsonl
	holdfast server -etcd 10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379 -addr :8443 -tls-cert server.pem -tls-key server-key.pem

See 'holdfast help server import' and docs/SERVER.md.`,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			dataDir := fs.String("data-dir", "holdfast-data", "the embedded store's `DIR`")
			etcdFlag := fs.String("etcd", "", "export an external cluster's store: its members' `HOST:PORT,...`")
			out := fs.String("o", "", "write the export to `FILE` (required)")
			etcdSec := addEtcdSecurityFlags(fs)
			return func(ctx context.Context, e *env, _ []string) error {
				if *out == "" {
					return usagef("-o is required")
				}
				if etcdSec.set() && *etcdFlag == "" {
					return usagef("-etcd-cacert, -etcd-cert, -etcd-key, -etcd-user and -etcd-password-file are for -etcd")
				}
				sec, err := etcdSec.security()
				if err != nil {
					return err
				}
				sc := store.Config{Kind: store.KindEmbedded, DataDir: *dataDir}
				if *etcdFlag != "" {
					members, err := parseEtcdMembers("-etcd", *etcdFlag)
					if err != nil {
						return err
					}
					sc = store.Config{Kind: store.KindExternal, Endpoints: members, Security: sec}
				}
				st, err := store.Open(ctx, sc)
				if err != nil {
					return err
				}
				defer st.Close()
				f, err := renameio.NewPendingFile(*out, renameio.WithPermissions(0o600))
				if err != nil {
					return err
				}
				defer f.Cleanup()
				head, keys, err := store.Export(ctx, st.Client, f)
				if err != nil {
					return err
				}
				if err := f.CloseAtomicallyReplace(); err != nil {
					return err
				}
				_, err = fmt.Fprintf(e.stdout, "exported store %s: %d keys up to revision %d to %s\n", st.ID, keys, head, *out)
				return err
			}
		},
	}
}

func serverImportCommand() *command {
	return &command{
		name:    "server import",
		summary: "write an export into a new, empty etcd cluster, with its revisions",
		doc: `
Server import writes an export (holdfast server export) into the etcd
cluster of -etcd, which must be new and empty: each change the audit log
keeps is written again whole at its revision, every other key at the
revision it had, the revisions between filled with a pad key; then every
key is read back and compared with the export. The new store has the old
one's store id and revisions: clients and relays resume from their
cursors, with no snapshot. A namespace key the audit log cannot explain
(older than the log, or written past the server) is written at its last
revision, and the history up to there is compacted: a client behind that
point resnapshots once.

It writes one transaction per revision of the old store, so it takes
about as long as that many publishes on the cluster.`,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			etcdFlag := fs.String("etcd", "", "the new cluster's members: `HOST:PORT,...` (required)")
			in := fs.String("i", "", "read the export from `FILE` (required)")
			etcdSec := addEtcdSecurityFlags(fs)
			logs := addLogFlags(fs)
			return func(ctx context.Context, e *env, _ []string) error {
				if *etcdFlag == "" || *in == "" {
					return usagef("-etcd and -i are required")
				}
				members, err := parseEtcdMembers("-etcd", *etcdFlag)
				if err != nil {
					return err
				}
				sec, err := etcdSec.security()
				if err != nil {
					return err
				}
				f, err := os.Open(*in)
				if err != nil {
					return usagef("-i: %v", err)
				}
				defer f.Close()
				// The store is not opened as a server opens it: that would
				// create a store id before the import writes the old one.
				cli, err := store.Dial(members, sec)
				if err != nil {
					return err
				}
				defer cli.Close()
				id, head, compacted, err := store.Import(ctx, cli, io.Reader(f), logs.logger(e.stderr))
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(e.stdout, "imported store %s up to revision %d (history compacted up to %d)\n", id, head, compacted)
				return err
			}
		},
	}
}
