// JDBC through mzproxy: run by TestDrivers as a single-file program
// (java -cp postgresql.jar JdbcCheck.java <url> <table>).
//
// pgjdbc uses the extended protocol throughout and switches to named
// server-side prepared statements after prepareThreshold executions.
import java.sql.*;

public class JdbcCheck {
    static void check(boolean cond, String what) {
        if (!cond) {
            System.err.println("FAILED: " + what);
            System.exit(1);
        }
    }

    public static void main(String[] args) throws Exception {
        String url = args[0], table = args[1];
        try (Connection conn = DriverManager.getConnection(url)) {
            try (PreparedStatement ps = conn.prepareStatement("SELECT ?::int + ?, ? || 'x'")) {
                ps.setInt(1, 40);
                ps.setInt(2, 2);
                ps.setString(3, "it's");
                try (ResultSet rs = ps.executeQuery()) {
                    check(rs.next() && rs.getInt(1) == 42 && rs.getString(2).equals("it'sx"), "parameters");
                }
            }
            try (Statement st = conn.createStatement()) {
                st.execute("CREATE TABLE " + table + " (id int PRIMARY KEY, name text)");
            }
            try (PreparedStatement ps = conn.prepareStatement("INSERT INTO " + table + " VALUES (?, ?)")) {
                for (int i = 0; i < 10; i++) {
                    ps.setInt(1, i);
                    ps.setString(2, "n" + i);
                    ps.addBatch();
                }
                int[] counts = ps.executeBatch();
                check(counts.length == 10, "batch");
            }
            // Past prepareThreshold (5) the driver uses a named statement.
            try (PreparedStatement ps = conn.prepareStatement("SELECT name FROM " + table + " WHERE id = ?")) {
                for (int i = 0; i < 10; i++) {
                    ps.setInt(1, i);
                    try (ResultSet rs = ps.executeQuery()) {
                        check(rs.next() && rs.getString(1).equals("n" + i), "prepared " + i);
                    }
                }
            }
            try (Statement st = conn.createStatement()) {
                st.execute("INSERT INTO " + table + " VALUES (1, 'dup')");
                check(false, "duplicate key accepted");
            } catch (SQLException e) {
                check("23505".equals(e.getSQLState()), "sqlstate " + e.getSQLState());
            }
            try (Statement st = conn.createStatement()) {
                st.executeQuery("SELECT 1/0");
                check(false, "division by zero accepted");
            } catch (SQLException e) {
                check("22012".equals(e.getSQLState()), "sqlstate " + e.getSQLState());
            }

            conn.setAutoCommit(false);
            try (Statement st = conn.createStatement()) {
                st.execute("DELETE FROM " + table);
                conn.rollback();
                try (ResultSet rs = st.executeQuery("SELECT count(*) FROM " + table)) {
                    check(rs.next() && rs.getInt(1) == 10, "rollback");
                }
                st.execute("UPDATE " + table + " SET name = upper(name) WHERE id < 5");
                conn.commit();
                try (ResultSet rs = st.executeQuery("SELECT count(*) FROM " + table + " WHERE name LIKE 'N%'")) {
                    check(rs.next() && rs.getInt(1) == 5, "commit");
                }
                conn.commit();
            }
            // A cursor fetching in batches: Execute with a row limit and
            // PortalSuspended, inside a transaction.
            try (PreparedStatement ps = conn.prepareStatement("SELECT g FROM generate_series(1, 1000) g")) {
                ps.setFetchSize(100);
                int n = 0;
                long sum = 0;
                try (ResultSet rs = ps.executeQuery()) {
                    while (rs.next()) {
                        n++;
                        sum += rs.getInt(1);
                    }
                }
                check(n == 1000 && sum == 500500, "fetch size: " + n + " rows");
            }
            conn.commit();
        }
        System.out.println("OK");
    }
}
