module github.com/mzproxy/mzproxy

go 1.26

require (
	github.com/cockroachdb/datadriven v1.0.3 // indirect
	github.com/hashicorp/golang-lru/v2 v2.0.7 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/pgx/v5 v5.12.0 // indirect
	github.com/lib/pq v1.12.3 // indirect
	github.com/pganalyze/pg_query_go/v6 v6.2.5 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	github.com/sirupsen/logrus v1.10.2 // indirect
	github.com/xdg-go/scram v1.4.0 // indirect
	github.com/xdg-go/stringprep v1.0.4 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sys v0.13.0 // indirect
	golang.org/x/text v0.41.0 // indirect
	google.golang.org/protobuf v1.33.0 // indirect
)
