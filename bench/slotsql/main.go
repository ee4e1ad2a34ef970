// Command slotsql prints the write slot this tree's mzproxy sends before
// an autocommit write or DDL (storage.OpenWriteFor without an
// incarnation: one flat statement since storage version 44), for the
// bench scripts that send it by hand (bench/ddlcost.sh's SLOT=proxy).
package main

import (
	"fmt"

	"github.com/mzproxy/mzproxy/proxy/storage"
)

func main() { fmt.Println(storage.OpenWriteFor(-1)) }
