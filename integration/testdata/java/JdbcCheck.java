// JDBC through mzproxy: java -cp postgresql.jar JdbcCheck.java <url> <table>,
// run by TestDriverMatrix (integration/driver_matrix_test.go says what each
// case does). Each case prints "ok <case>" or "FAIL <case>: <detail>"; the
// exit status is 1 when any failed.
//
// pgjdbc uses the extended protocol throughout (a Statement too), sends
// parameter types with Parse (setInt: int4, setLong: int8, setString:
// varchar), and switches a PreparedStatement to a named server-side
// statement after prepareThreshold (5) executions.
import java.sql.*;
import java.util.ArrayList;
import java.util.List;

public class JdbcCheck {
    interface Case {
        void run() throws Exception;
    }

    static final List<String> failed = new ArrayList<>();
    static Connection conn;
    static String table;
    static long ts;

    static void check(boolean cond, String what) {
        if (!cond) throw new IllegalStateException(what);
    }

    static void run(String name, Case c) {
        try {
            c.run();
            System.out.println("ok " + name);
        } catch (Exception e) {
            failed.add(name);
            String code = e instanceof SQLException ? " (SQLSTATE " + ((SQLException) e).getSQLState() + ")" : "";
            System.out.println("FAIL " + name + ": " + String.valueOf(e).replaceAll("\\s+", " ") + code);
            e.printStackTrace();
            try {
                if (!conn.getAutoCommit()) {
                    conn.rollback();
                    conn.setAutoCommit(true);
                }
            } catch (SQLException again) {
                again.printStackTrace();
            }
        }
    }

    static String oneString(String sql, Object... args) throws SQLException {
        try (PreparedStatement ps = conn.prepareStatement(sql)) {
            for (int i = 0; i < args.length; i++) ps.setObject(i + 1, args[i]);
            try (ResultSet rs = ps.executeQuery()) {
                check(rs.next(), sql + ": no row");
                return rs.getString(1);
            }
        }
    }

    static int update(String sql, Object... args) throws SQLException {
        try (PreparedStatement ps = conn.prepareStatement(sql)) {
            for (int i = 0; i < args.length; i++) ps.setObject(i + 1, args[i]);
            return ps.executeUpdate();
        }
    }

    static void expectState(String code, Case c) throws Exception {
        try {
            c.run();
        } catch (SQLException e) {
            check(code.equals(e.getSQLState()), "SQLSTATE " + e.getSQLState() + " (" + e.getMessage() + "), want " + code);
            return;
        }
        throw new IllegalStateException("succeeded, want SQLSTATE " + code);
    }

    static void mzNowRead(int k, String want) throws SQLException {
        try (PreparedStatement ps = conn.prepareStatement("SELECT v, mz_now() FROM " + table + " WHERE k = ?")) {
            ps.setInt(1, k);
            try (ResultSet rs = ps.executeQuery()) {
                check(rs.next(), "no row");
                ts = rs.getLong(2);
                check(rs.getString(1).equals(want) && ts > 0, "got " + rs.getString(1) + ", " + ts);
            }
        }
    }

    public static void main(String[] args) throws Exception {
        conn = DriverManager.getConnection(args[0]);
        table = args[1];
        run("ddl", () -> {
            try (Statement st = conn.createStatement()) {
                st.execute("CREATE TABLE " + table + " (k int PRIMARY KEY, v text)");
            }
        });
        run("insert", () -> {
            String[] vs = {"one", "two", "three"};
            for (int k = 1; k <= 3; k++) check(update("INSERT INTO " + table + " VALUES (?, ?)", k, vs[k - 1]) == 1, "insert " + k);
        });
        run("update", () -> check(update("UPDATE " + table + " SET v = ? WHERE k = ?", "uno", 1) == 1, "update"));
        run("select", () -> check(oneString("SELECT v FROM " + table + " WHERE k = ?", 1).equals("uno"), "select"));
        run("mz_now_param", () -> mzNowRead(1, "uno"));
        run("plain_after_mz_now", () -> {
            try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery("SELECT 1")) {
                check(rs.next() && rs.getInt(1) == 1, "SELECT 1");
            }
        });
        run("param_after_mz_now", () -> check(oneString("SELECT ?::int", 42).equals("42"), "SELECT 42"));
        long before = ts;
        run("as_of_param", () -> {
            update("UPDATE " + table + " SET v = ? WHERE k = ?", "eins", 1);
            String v = oneString("SELECT v FROM " + table + " WHERE k = ? AS OF ?", 1, before);
            check(v.equals("uno"), "got " + v);
        });
        run("repeated_ts_reads", () -> {
            // The same timestamped reads eight times each on one
            // connection: the unnamed statement below prepareThreshold
            // (the event loop binds a statement of the proxy's from the
            // second use), a named one past it.
            long last = 0;
            for (int i = 0; i < 8; i++) {
                int k = 2 + i % 2;
                try (PreparedStatement ps = conn.prepareStatement("SELECT v, mz_now() FROM " + table + " WHERE k = ?")) {
                    ps.setInt(1, k);
                    try (ResultSet rs = ps.executeQuery()) {
                        check(rs.next(), "no row");
                        String want = k == 2 ? "two" : "three";
                        check(rs.getString(1).equals(want) && rs.getLong(2) >= last,
                            "read " + i + ": " + rs.getString(1) + " at " + rs.getLong(2) + ", want " + want + " at or after " + last);
                        last = rs.getLong(2);
                    }
                }
            }
            for (int i = 0; i < 8; i++) {
                String v = oneString("SELECT v FROM " + table + " WHERE k = ? AS OF ?", 1, before);
                check(v.equals("uno"), "AS OF read " + i + ": " + v);
            }
        });
        run("as_of_at_least_param", () -> {
            String v = oneString("SELECT v FROM " + table + " WHERE k = ? AS OF AT LEAST ?", 1, before);
            check(v.equals("uno") || v.equals("eins"), "got " + v);
        });
        run("mz_now_repeated", () -> {
            // Runs of reads of the present between writes (the read guard
            // learns the settled count of writes and reads through it), on
            // one statement: unnamed, then server-prepared from the fifth.
            long last = 0;
            try (PreparedStatement ps = conn.prepareStatement("SELECT v, mz_now() FROM " + table + " WHERE k = ?")) {
                for (int i = 0; i < 12; i++) {
                    String want = "r" + (i / 4);
                    if (i % 4 == 0) update("UPDATE " + table + " SET v = ? WHERE k = ?", want, 1);
                    ps.setInt(1, 1);
                    try (ResultSet rs = ps.executeQuery()) {
                        check(rs.next(), "read " + i + ": no row");
                        String v = rs.getString(1);
                        long now = rs.getLong(2);
                        check(v.equals(want) && now >= last, "read " + i + ": got " + v + ", " + now + ", want " + want + " at or after " + last);
                        last = now;
                    }
                }
            }
            update("UPDATE " + table + " SET v = ? WHERE k = ?", "eins", 1); // the later cases' row
        });
        run("rollback", () -> {
            conn.setAutoCommit(false);
            update("DELETE FROM " + table + " WHERE k = ?", 2);
            conn.rollback();
            conn.setAutoCommit(true);
            check(oneString("SELECT count(*) FROM " + table).equals("3"), "rows after the rollback");
        });
        run("unique_violation", () -> {
            expectState("23505", () -> update("INSERT INTO " + table + " VALUES (?, ?)", 1, "dup"));
            check(oneString("SELECT count(*) FROM " + table).equals("3"), "rows after the violation");
        });
        run("timeout", () -> {
            try (Statement st = conn.createStatement()) {
                st.execute("SET statement_timeout = '100ms'");
                expectState("57014", () -> st.executeQuery("SELECT pg_sleep(5)").close());
                st.execute("RESET statement_timeout");
            }
            check(oneString("SELECT 1").equals("1"), "SELECT 1 after the timeout");
        });

        run("prepare_threshold", () -> {
            // Past prepareThreshold the mz_now() read is a named statement.
            try (PreparedStatement ps = conn.prepareStatement("SELECT v, mz_now() FROM " + table + " WHERE k = ?")) {
                for (int i = 0; i < 7; i++) {
                    ps.setInt(1, 3);
                    try (ResultSet rs = ps.executeQuery()) {
                        check(rs.next() && rs.getString(1).equals("three") && rs.getLong(2) > 0, "execution " + i);
                    }
                }
            }
            check(oneString("SELECT ?::int + 1", 1).equals("2"), "query after the named one");
        });
        run("batch", () -> {
            try (PreparedStatement ps = conn.prepareStatement("INSERT INTO " + table + " VALUES (?, ?)")) {
                for (int k = 100; k < 110; k++) {
                    ps.setInt(1, k);
                    ps.setString(2, "b" + k);
                    ps.addBatch();
                }
                check(ps.executeBatch().length == 10, "batch counts");
            }
            check(oneString("SELECT count(*) FROM " + table + " WHERE k >= ?", 100).equals("10"), "rows of the batch");
        });
        run("fetch_size", () -> {
            // A cursor fetching in batches: Execute with a row limit and
            // PortalSuspended, inside a transaction.
            conn.setAutoCommit(false);
            try (PreparedStatement ps = conn.prepareStatement("SELECT g FROM generate_series(1, ?) g")) {
                ps.setInt(1, 1000);
                ps.setFetchSize(100);
                long n = 0, sum = 0;
                try (ResultSet rs = ps.executeQuery()) {
                    while (rs.next()) {
                        n++;
                        sum += rs.getInt(1);
                    }
                }
                check(n == 1000 && sum == 500500, "fetch size: " + n + " rows");
            }
            conn.commit();
            conn.setAutoCommit(true);
        });
        conn.close();
        System.exit(failed.isEmpty() ? 0 : 1);
    }
}
