// Lazy history from JDBC: java -cp postgresql.jar Lazy17.java <url>, run by
// TestOutside17LazyHistoryDrivers (integration/outside17_test.go; the
// cases are those of testdata/python/lazy17.py). batch: executeBatch, which
// pgjdbc sends as one batch of Bind/Execute pairs before one Sync; copy:
// CopyManager.
import java.io.StringReader;
import java.sql.*;
import java.util.ArrayList;
import java.util.List;

import org.postgresql.PGConnection;

public class Lazy17 {
    interface Case {
        void run() throws Exception;
    }

    static final List<String> failed = new ArrayList<>();
    static Connection conn;

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

    static void exec(String sql) throws SQLException {
        try (Statement st = conn.createStatement()) {
            st.execute(sql);
        }
    }

    static void insert(String table, int k) throws SQLException {
        try (PreparedStatement ps = conn.prepareStatement("INSERT INTO " + table + " VALUES (?)")) {
            ps.setInt(1, k);
            check(ps.executeUpdate() == 1, "update count");
        }
    }

    static int count(String table) throws SQLException {
        try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery("SELECT count(*) FROM " + table)) {
            rs.next();
            return rs.getInt(1);
        }
    }

    static void block(String table, int... ks) throws SQLException {
        conn.setAutoCommit(false);
        try {
            for (int k : ks) insert(table, k);
            conn.commit();
        } catch (SQLException e) {
            conn.rollback();
            throw e;
        } finally {
            conn.setAutoCommit(true);
        }
    }

    public static void main(String[] args) throws Exception {
        conn = DriverManager.getConnection(args[0]);
        run("first_write_in_block", () -> {
            exec("CREATE TABLE lz_block (k int)");
            block("lz_block", 1, 2);
            check(count("lz_block") == 2, "rows " + count("lz_block"));
        });
        exec("CREATE TABLE lz_src (k int)");
        exec("CREATE TABLE lz_audit (k int)");
        exec("CREATE TABLE lz_audit2 (k int)");
        exec("CREATE FUNCTION lz_copy() RETURNS trigger LANGUAGE plpgsql AS $$ "
                + "BEGIN INSERT INTO lz_audit VALUES (NEW.k); "
                + "IF NEW.k > 100 THEN INSERT INTO lz_audit2 VALUES (NEW.k); END IF; RETURN NEW; END $$");
        exec("CREATE TRIGGER lz_src_audit AFTER INSERT ON lz_src FOR EACH ROW EXECUTE FUNCTION lz_copy()");
        run("hidden_writer_autocommit", () -> {
            insert("lz_src", 1);
            check(count("lz_audit") == 1, "audit " + count("lz_audit"));
        });
        run("hidden_writer_block", () -> {
            String code = null;
            try {
                block("lz_src", 101);
            } catch (SQLException e) {
                code = e.getSQLState();
            }
            check("40001".equals(code), "the first block: " + code + ", want 40001");
            block("lz_src", 101);
            check(count("lz_audit2") == 1, "audit2 " + count("lz_audit2"));
        });
        run("batch", () -> {
            exec("CREATE TABLE lz_batch (k int)");
            try (PreparedStatement ps = conn.prepareStatement("INSERT INTO lz_batch VALUES (?)")) {
                for (int k = 1; k <= 3; k++) {
                    ps.setInt(1, k);
                    ps.addBatch();
                }
                check(ps.executeBatch().length == 3, "batch counts");
            }
            check(count("lz_batch") == 3, "rows " + count("lz_batch"));
        });
        run("copy", () -> {
            exec("CREATE TABLE lz_copy (k int)");
            long n = conn.unwrap(PGConnection.class).getCopyAPI().copyIn("COPY lz_copy (k) FROM STDIN", new StringReader("1\n2\n"));
            check(n == 2 && count("lz_copy") == 2, "copied " + n + ", rows " + count("lz_copy"));
        });
        conn.close();
        System.exit(failed.isEmpty() ? 0 : 1);
    }
}
