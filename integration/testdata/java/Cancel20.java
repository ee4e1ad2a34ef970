// Cancel and setQueryTimeout from JDBC: java -cp postgresql.jar
// Cancel20.java <url>, run by TestCancel20JDBC (integration/cancel20_test.go)
// through mzproxy and directly, whose outputs must be the same (the cases
// of testdata/python/cancel19.py). cancel: Statement.cancel() from another
// thread once a second connection sees the statement in its pg_sleep
// (pg_stat_activity); query_timeout: setQueryTimeout(5), whose timer sends
// the same CancelRequest; a case whose statement was not seen sleeping
// within 4 s of its execute() (a loaded machine, a wait before it ran) is
// run again, up to three times. Each case on a connection of its own, one
// case at a time; one line each. The tables c20_<case> (k int PRIMARY KEY,
// v int) with the row (1, 0) are made first.
import java.sql.*;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicBoolean;

public class Cancel20 {
    static String url;

    static final String[][] OPS = {
        {"read", "SELECT count(*) FROM %s, pg_sleep(30) WHERE k = ?"},
        {"write", "UPDATE %s SET v = v + 1 WHERE k = (SELECT ?::int FROM pg_sleep(30))"},
        {"ddl", "CREATE TABLE %1$s_ctas AS SELECT k FROM %1$s, pg_sleep(30)"},
    };

    static final String SLEEPING = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'"
            + " AND datname = current_database() AND pid <> pg_backend_pid() AND query ~ (? || '\\M')";

    static String described(SQLException e) {
        if (e == null) return "none";
        String m = e.getMessage();
        int nl = m.indexOf('\n');
        return e.getSQLState() + " " + (nl < 0 ? m : m.substring(0, nl));
    }

    // watch waits until table's statement sleeps, or 20 s; it reports
    // whether it saw it.
    static boolean watch(String table, AtomicBoolean done) {
        try (Connection w = DriverManager.getConnection(url);
             PreparedStatement ps = w.prepareStatement(SLEEPING)) {
            ps.setString(1, table);
            long deadline = System.nanoTime() + 20_000_000_000L;
            while (System.nanoTime() < deadline && !done.get()) {
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    if (rs.getInt(1) > 0) return true;
                }
                Thread.sleep(50);
            }
        } catch (Exception e) {
            e.printStackTrace();
        }
        return false;
    }

    // runCase runs one case; null when it must be run again (its timeout
    // came before the statement was seen sleeping).
    static String runCase(String op, String sql, String mech, boolean block, String table) throws Exception {
        List<String> line = new ArrayList<>();
        try (Connection conn = DriverManager.getConnection(url)) {
            if (block) conn.setAutoCommit(false);
            PreparedStatement ps = conn.prepareStatement(String.format(sql, table));
            if (sql.contains("?")) ps.setInt(1, 1);
            AtomicBoolean done = new AtomicBoolean();
            AtomicBoolean seen = new AtomicBoolean();
            long start = System.nanoTime();
            Thread watcher = new Thread(() -> {
                // For query_timeout, seen only when seen sleeping well
                // before the timer's cancel (5 s after execute()): one
                // that came while the statement waited (a lock, mzproxy's
                // own work) may be answered otherwise, and is run again.
                boolean sleeping = watch(table, done);
                seen.set(sleeping && (mech.equals("cancel") || System.nanoTime() - start < 4_000_000_000L));
                if (mech.equals("cancel")) {
                    try {
                        ps.cancel();
                    } catch (SQLException e) {
                        e.printStackTrace();
                    }
                }
            });
            if (mech.equals("query_timeout")) ps.setQueryTimeout(5);
            watcher.start();
            SQLException err = null;
            try {
                ps.execute();
            } catch (SQLException e) {
                err = e;
            }
            done.set(true);
            watcher.join();
            ps.close();
            if (!seen.get()) {
                if (block) {
                    conn.rollback();
                    conn.setAutoCommit(true);
                }
                try (Statement st = conn.createStatement()) {
                    // What a statement the timeout missed may have done.
                    st.execute(String.format("UPDATE %1$s SET v = 0; DROP TABLE IF EXISTS %1$s_ctas", table));
                }
                return null;
            }
            line.add("stmt=" + described(err));
            if (block) {
                err = null;
                try (Statement st = conn.createStatement()) {
                    st.execute("SELECT 1");
                } catch (SQLException e) {
                    err = e;
                }
                line.add("in_block=" + described(err));
                conn.rollback();
                conn.setAutoCommit(true);
            }
            try (Statement st = conn.createStatement();
                 ResultSet rs = st.executeQuery("SELECT 41 + 1")) {
                rs.next();
                line.add("next=" + rs.getInt(1));
            }
            try (Statement st = conn.createStatement();
                 ResultSet rs = st.executeQuery(String.format(
                         "SELECT v::text || ' ' || (to_regclass('%1$s_ctas') IS NULL)::text FROM %1$s WHERE k = 1", table))) {
                rs.next();
                line.add("after=" + rs.getString(1));
            }
        }
        return String.join("; ", line);
    }

    public static void main(String[] args) throws Exception {
        url = args[0];
        List<Object[]> cases = new ArrayList<>();
        for (String[] op : OPS)
            for (String mech : new String[] {"cancel", "query_timeout"})
                for (boolean block : new boolean[] {false, true})
                    cases.add(new Object[] {op[0], op[1], mech, block});
        try (Connection setup = DriverManager.getConnection(url); Statement st = setup.createStatement()) {
            for (Object[] c : cases) {
                String t = table(c);
                st.execute("CREATE TABLE " + t + " (k int PRIMARY KEY, v int)");
                st.execute("INSERT INTO " + t + " VALUES (1, 0)");
            }
        }
        // One case at a time: through mzproxy a pin may wait for the
        // writers' gate that another case's sleeping write or DDL holds, so
        // cases run all at once delayed each other past the 4 s window on
        // a loaded machine (CI: "not seen sleeping in three tries").
        Map<String, String> results = new TreeMap<>();
        for (Object[] c : cases) {
            String out = null;
            try {
                for (int i = 0; i < 3 && out == null; i++) {
                    out = runCase((String) c[0], (String) c[1], (String) c[2], (Boolean) c[3], table(c));
                }
                if (out == null) out = "not seen sleeping in three tries";
            } catch (Exception e) {
                out = "exception " + e;
                e.printStackTrace();
            }
            results.put(name(c), out);
        }
        for (Map.Entry<String, String> e : results.entrySet()) System.out.println(e.getKey() + ": " + e.getValue());
        System.exit(results.size() == cases.size() ? 0 : 1);
    }

    static String name(Object[] c) {
        return c[0] + "_" + c[2] + "_" + ((Boolean) c[3] ? "block" : "autocommit");
    }

    static String table(Object[] c) {
        return "c20_" + name(c);
    }
}
