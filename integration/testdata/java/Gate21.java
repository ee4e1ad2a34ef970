// setQueryTimeout and cancel of a JDBC block's first read whose pin
// waits for mzproxy's writers' gate: java -cp postgresql.jar Gate21.java
// <url> <table>, run by TestOutside21JDBCTimeoutInGatedPin
// (integration/outside21_test.go) through mzproxy. Per case, a holder
// connection's block alters <table>_hold (a written table: the block's T
// is chosen, and the gate is the block's till its end); then a block's
// first read of <table> (pgjdbc sends BEGIN and the read in one batch)
// waits for the gate, and is interrupted by setQueryTimeout(3) (pgjdbc's
// timer sends a CancelRequest) or by Statement.cancel() once pg_locks
// shows the wait. A case whose read was not seen waiting within 2.5 s of
// its execute() (the timer's cancel may then have come before mzproxy had
// the statement: dropped, as PostgreSQL drops one for an idle session) is
// run again, up to three times. A read still waiting 20 s after its
// execute() is a lost timeout: the holder rolls back and the case says
// "lost". One line per case.
import java.sql.*;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;

public class Gate21 {
    static String url;
    static String table;

    // A client's pin: mzproxy's own tick waits for the gate too, briefly,
    // on a connection of its own application_name.
    static final String WAITING = "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            + " WHERE NOT l.granted AND l.relation = 'mzproxy.gate'::regclass AND l.mode = 'ExclusiveLock'"
            + " AND a.application_name IS DISTINCT FROM 'mzproxy internal'";

    static String described(SQLException e) {
        if (e == null) return "none";
        String m = e.getMessage();
        int nl = m.indexOf('\n');
        return e.getSQLState() + " " + (nl < 0 ? m : m.substring(0, nl));
    }

    // watch waits until a pin waits for the gate, or 20 s; it reports
    // whether it saw it.
    static boolean watch(AtomicBoolean done) {
        try (Connection w = DriverManager.getConnection(url);
             Statement st = w.createStatement()) {
            long deadline = System.nanoTime() + 20_000_000_000L;
            while (System.nanoTime() < deadline && !done.get()) {
                try (ResultSet rs = st.executeQuery(WAITING)) {
                    rs.next();
                    if (rs.getInt(1) > 0) return true;
                }
                Thread.sleep(20);
            }
        } catch (Exception e) {
            e.printStackTrace();
        }
        return false;
    }

    static String runCase(String mech, int n) throws Exception {
        List<String> line = new ArrayList<>();
        try (Connection holder = DriverManager.getConnection(url);
             Connection conn = DriverManager.getConnection(url)) {
            holder.setAutoCommit(false);
            try (Statement st = holder.createStatement()) {
                st.execute("ALTER TABLE " + table + "_hold ADD COLUMN c_" + mech + "_" + n + " int");
            }
            conn.setAutoCommit(false);
            PreparedStatement ps = conn.prepareStatement("SELECT count(*) FROM " + table + " WHERE k = ?");
            ps.setInt(1, 1);
            AtomicBoolean done = new AtomicBoolean();
            AtomicBoolean seen = new AtomicBoolean();
            AtomicBoolean lost = new AtomicBoolean();
            long start = System.nanoTime();
            Thread watcher = new Thread(() -> {
                boolean waiting = watch(done);
                seen.set(waiting && (mech.equals("cancel") || System.nanoTime() - start < 2_500_000_000L));
                if (waiting && mech.equals("cancel")) {
                    try {
                        ps.cancel();
                    } catch (SQLException e) {
                        e.printStackTrace();
                    }
                }
                // The watchdog: a read still waiting 20 s after execute().
                while (!done.get() && System.nanoTime() - start < 20_000_000_000L) {
                    try {
                        Thread.sleep(50);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
                if (!done.get()) {
                    lost.set(true);
                    try {
                        holder.rollback();
                    } catch (SQLException e) {
                        e.printStackTrace();
                    }
                }
            });
            if (mech.equals("query_timeout")) ps.setQueryTimeout(3);
            watcher.start();
            SQLException err = null;
            try {
                ps.executeQuery().close();
            } catch (SQLException e) {
                err = e;
            }
            done.set(true);
            watcher.join();
            ps.close();
            if (lost.get()) {
                return "lost: the read waited 20 s (" + described(err) + ")";
            }
            if (!seen.get()) {
                conn.rollback();
                holder.rollback();
                return null;
            }
            line.add("stmt=" + described(err));
            err = null;
            try (Statement st = conn.createStatement()) {
                st.execute("SELECT 1");
            } catch (SQLException e) {
                err = e;
            }
            line.add("in_block=" + described(err));
            conn.rollback();
            holder.rollback();
            conn.setAutoCommit(true);
            try (Statement st = conn.createStatement();
                 ResultSet rs = st.executeQuery("SELECT count(*) FROM " + table)) {
                rs.next();
                line.add("next=" + rs.getInt(1));
            }
        }
        return String.join("; ", line);
    }

    public static void main(String[] args) throws Exception {
        url = args[0];
        table = args[1];
        int n = 0;
        for (String mech : new String[] {"cancel", "query_timeout"}) {
            String out = null;
            for (int i = 0; i < 3 && out == null; i++) {
                out = runCase(mech, n++);
            }
            if (out == null) out = "not seen waiting in three tries";
            System.out.println(mech + ": " + out);
        }
    }
}
